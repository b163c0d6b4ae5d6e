#include "kiln/ops/attrs.h"

#include <cstring>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::ops {
namespace {

static_assert(std::variant_size_v<attrs_detail::AttrsVariant> == 0
#define KILN_ATTRS_COUNT(T) +1
                  KILN_FOR_EACH_ATTRS(KILN_ATTRS_COUNT)
#undef KILN_ATTRS_COUNT
                  ,
              "AttrsKind and the variant disagree");

constexpr std::string_view kFamilyNames[] = {
#define KILN_ATTRS_NAME(T) #T,
    KILN_FOR_EACH_ATTRS(KILN_ATTRS_NAME)
#undef KILN_ATTRS_NAME
};

struct Hasher {
  size_t h = 1469598103934665603ull;
  void mix(uint64_t v) { h = (h ^ v) * 1099511628211ull; }
  template <class T>
  void add(const T& v) {
    if constexpr (std::is_same_v<T, double>) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      mix(bits);
    } else if constexpr (std::is_enum_v<T>) {
      mix(uint64_t(v));
    } else if constexpr (std::is_integral_v<T>) {
      mix(uint64_t(v));
    } else {  // std::array / std::vector: the elements, then the length
      for (const auto& x : v) add(x);
      mix(0xa5 ^ uint64_t(v.size()));
    }
  }
};

template <class T>
void print_value(std::ostream& s, const T& v) {
  if constexpr (std::is_same_v<T, bool>) {
    s << (v ? "1" : "0");
  } else if constexpr (std::is_same_v<T, DType>) {
    s << dtype_name(v);
  } else if constexpr (std::is_arithmetic_v<T>) {
    s << v;
  } else {
    s << "[";
    bool first = true;
    for (const auto& x : v) {
      if (!first) s << ",";
      s << x;
      first = false;
    }
    s << "]";
  }
}

// The i-th name in a family's "a, b, c" field list.
std::string_view field_name(std::string_view names, size_t i) {
  for (; i > 0; --i) names = names.substr(names.find(',') + 2);
  return names.substr(0, names.find(','));
}

}  // namespace

std::string layout_bits_str(uint32_t bits) {
  std::string in, out;
  for (int i = 0; i < kNchw16cOutputBit; ++i) {
    for (auto [list, set] :
         {std::pair{&in, input_is_nchw16c(bits, i)}, std::pair{&out, output_is_nchw16c(bits, i)}}) {
      if (!set) continue;
      if (!list->empty()) *list += ',';
      *list += std::to_string(i);
    }
  }
  return "in[" + in + "] out[" + out + "]";
}

std::string_view attrs_kind_name(AttrsKind kind) {
  return kFamilyNames[size_t(kind)];
}

namespace attrs_detail {
void throw_wrong_attrs(AttrsKind expected, AttrsKind actual) {
  throw Error("attrs hold " + std::string(attrs_kind_name(actual)) + ", not the " +
              std::string(attrs_kind_name(expected)) + " asked for");
}
}  // namespace attrs_detail

uint32_t* Attrs::layout_bits() {
  return visit([](auto& family) -> uint32_t* {
    if constexpr (requires { family.nchw16c; }) {
      return &family.nchw16c;
    } else {
      return nullptr;
    }
  });
}

size_t hash_attrs(const Attrs& a) {
  Hasher h;
  h.mix(uint64_t(a.kind()));
  a.visit([&](const auto& family) {
    std::apply([&](const auto&... field) { (h.add(field), ...); }, family.fields());
  });
  return h.h;
}

std::string attrs_str(const Attrs& a) {
  std::ostringstream s;
  a.visit([&](const auto& family) {
    using T = std::decay_t<decltype(family)>;
    static const T defaults{};
    const auto fields = family.fields();
    const auto default_fields = defaults.fields();
    [&]<size_t... I>(std::index_sequence<I...>) {
      auto one = [&](std::string_view name, const auto& v, const auto& d) {
        if (v == d) return;
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, uint32_t>) {  // nchw16c
          s << " nChw16c=" << layout_bits_str(v);
        } else {
          s << " " << name << "=";
          print_value(s, v);
        }
      };
      (void)one;
      (one(field_name(T::field_names, I), std::get<I>(fields), std::get<I>(default_fields)), ...);
    }
    (std::make_index_sequence<std::tuple_size_v<decltype(fields)>>());
  });
  return s.str();
}

}  // namespace kiln::ops
