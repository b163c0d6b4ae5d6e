// Runs ONNX models with onnxruntime-node, for the tests that hold Kiln's exports against Kiln's
// own numbers: `node run_onnx_models.js JOBS.json` prints one JSON line,
//   {"outputs": [{NAME: {"dims": [...], "data": [...]}, ...}, ...]}   (one object per job)
// where JOBS.json is {"jobs": [{"model": PATH, "inputs": {NAME: {"dtype", "dims", "data"}}}]}
// and dtype is an onnxruntime tensor type ("float32", "int64", ...). Exit status 1 with the
// runtime's message when a model does not load or run. `node run_onnx_models.js --version`
// prints the runtime's version (status 1 where onnxruntime-node cannot be found).
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');

function tensorOf(input) {
  const data = input.dtype === 'int64' ? BigInt64Array.from(input.data.map((v) => BigInt(v)))
      : input.dtype === 'int32' ? Int32Array.from(input.data) : Float32Array.from(input.data);
  return new ort.Tensor(input.dtype, data, input.dims);
}

async function main() {
  if (process.argv[2] === '--version') {
    process.stdout.write(ort.env.versions.node + '\n');
    return;
  }
  const {jobs} = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const outputs = [];
  for (const job of jobs) {
    // One thread: ctest runs other tests beside this one.
    const session = await ort.InferenceSession.create(job.model, {intraOpNumThreads: 1});
    const feeds = {};
    for (const [name, input] of Object.entries(job.inputs)) feeds[name] = tensorOf(input);
    const results = await session.run(feeds);
    const out = {};
    for (const [name, t] of Object.entries(results)) {
      out[name] = {dims: t.dims, data: Array.from(t.data, (v) => Number(v))};
    }
    outputs.push(out);
  }
  process.stdout.write(JSON.stringify({outputs}) + '\n');
}

main().catch((e) => {
  process.stderr.write('run_onnx_models: ' + (e && e.message ? e.message : e) + '\n');
  process.exit(1);
});
