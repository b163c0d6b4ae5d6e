#pragma once
// A shard rule's form checked against its op in one process: every rank of the form's device
// matrix runs the op on its blocks of the inputs (as the tensor maps cut them) with the form's
// local attributes, and the blocks of the outputs are put back together, partial sums added up.
// What comes out must be what the op computes on the whole inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/core/random.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::shard_simulation {

inline Tensor uniform_tensor(const Shape& shape, uint64_t seed, float low = -1.f,
                             float high = 1.f) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = gen.uniform(low, high);
  return t;
}

// Rank r's coordinate along each axis of a row-major device matrix.
inline std::vector<int64_t> coordinates_of(int64_t r, const std::vector<int64_t>& matrix) {
  std::vector<int64_t> c(matrix.size());
  for (size_t a = matrix.size(); a-- > 0;) {
    c[a] = r % matrix[a];
    r /= matrix[a];
  }
  return c;
}

// The block of `t` a rank at `coords` holds under `map`.
inline Tensor block_of(const Tensor& t, const std::vector<int>& map,
                       const std::vector<int64_t>& matrix, const std::vector<int64_t>& coords) {
  Tensor b = t;
  for (size_t d = 0; d < map.size(); ++d) {
    if (map[d] == ops::kNotSplit) continue;
    const int64_t len = t.dim(int(d)) / matrix[size_t(map[d])];
    const int64_t at = coords[size_t(map[d])] * len;
    b = ops::slice(b, int64_t(d), at, at + len);
  }
  return b.clone();
}

// The op's outputs computed rank by rank under `strategy`, as f32.
inline std::vector<Tensor> run_as_ranks(ops::OpKind kind, const std::vector<Tensor>& inputs,
                                        const ops::Attrs& attrs, const ops::Strategy& strategy) {
  std::vector<ops::TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back(ops::meta_of(t));
  const ops::ShardedForm f = ops::shard_form(kind, metas, attrs, strategy, 0);
  const std::vector<ops::TensorMeta> out_metas = ops::infer(kind, metas, attrs);
  std::vector<Tensor> whole;
  for (const ops::TensorMeta& m : out_metas) whole.push_back(Tensor::zeros(m.shape));
  int64_t ranks = 1;
  for (int64_t p : f.device_matrix) ranks *= p;
  for (int64_t r = 0; r < ranks; ++r) {
    const std::vector<int64_t> coords = coordinates_of(r, f.device_matrix);
    std::vector<Tensor> blocks;
    for (size_t i = 0; i < inputs.size(); ++i) {
      blocks.push_back(block_of(inputs[i], f.input_maps[i], f.device_matrix, coords));
    }
    std::vector<Tensor> local = ops::call(kind, blocks, f.local_attrs);
    if (f.output_scale != 1.0) local[0] = ops::mul_scalar(local[0], f.output_scale);
    for (size_t o = 0; o < whole.size(); ++o) {
      const std::vector<int>& map = f.output_maps[o];
      const std::vector<int>& partial = f.output_partial[o];
      // Ranks that repeat another's block (along an axis neither in the map nor partial) add
      // nothing new: only the first of them counts.
      bool counts = true;
      for (size_t a = 0; a < coords.size(); ++a) {
        const bool mapped = std::find(map.begin(), map.end(), int(a)) != map.end();
        const bool summed = std::find(partial.begin(), partial.end(), int(a)) != partial.end();
        if (!mapped && !summed && coords[a] != 0) counts = false;
      }
      const Shape& shape = whole[o].shape();
      Shape block_shape = shape;
      for (size_t d = 0; d < map.size(); ++d) {
        if (map[d] != ops::kNotSplit) block_shape[int(d)] /= f.device_matrix[size_t(map[d])];
      }
      EXPECT_EQ(local[o].shape(), block_shape) << "output " << o << " on rank " << r;
      if (!counts || local[o].shape() != block_shape) continue;
      const std::vector<float> v = ops::cast(local[o], DType::f32).to_vector<float>();
      float* out = whole[o].data<float>();
      for (int64_t k = 0; k < int64_t(v.size()); ++k) {
        int64_t rest = k, flat = 0, stride = 1;
        for (int d = shape.rank() - 1; d >= 0; --d) {
          const int64_t idx = rest % block_shape[d];
          rest /= block_shape[d];
          const int64_t offset = map[size_t(d)] == ops::kNotSplit
                                     ? 0
                                     : coords[size_t(map[size_t(d)])] * block_shape[d];
          flat += (offset + idx) * stride;
          stride *= shape[d];
        }
        out[flat] += v[size_t(k)];
      }
    }
  }
  return whole;
}

// run_as_ranks against the op on the whole inputs, every output within 1e-5 of its scale.
inline void expect_form_computes_the_op(ops::OpKind kind, const std::vector<Tensor>& inputs,
                                        const ops::Attrs& attrs, const ops::Strategy& strategy,
                                        size_t outputs_to_check = 0) {
  SCOPED_TRACE(std::string(ops::op_name(kind)) + " " + ops::strategy_str(strategy));
  std::vector<Tensor> whole_inputs;
  for (const Tensor& t : inputs) whole_inputs.push_back(t.clone());
  const std::vector<Tensor> want = ops::call(kind, whole_inputs, attrs);
  const std::vector<Tensor> got = run_as_ranks(kind, inputs, attrs, strategy);
  const size_t n = outputs_to_check ? outputs_to_check : want.size();
  for (size_t o = 0; o < n; ++o) {
    const std::vector<float> w = ops::cast(want[o], DType::f32).to_vector<float>();
    const std::vector<float> g = got[o].to_vector<float>();
    ASSERT_EQ(g.size(), w.size()) << "output " << o;
    double scale = 1;
    for (float x : w) scale = std::max(scale, double(std::fabs(x)));
    for (size_t k = 0; k < w.size(); ++k) {
      ASSERT_NEAR(g[k], w[k], 1e-5 * scale) << "output " << o << " element " << k;
    }
  }
}

}  // namespace kiln::shard_simulation
