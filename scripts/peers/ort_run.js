#!/usr/bin/env node
// ONNX Runtime peer for opfuse's whole-model benchmark: one ONNX file, one graph optimization
// level, one thread count, CPU execution provider, through the onnxruntime-node binding
// installed next to this file (npm install --ignore-scripts: the CPU library ships inside the
// package; the install script only fetches optional GPU libraries).
//
//   node scripts/peers/ort_run.js MODEL.onnx --level disabled|basic|extended|all --threads N
//        --warmup W --repeat R [--dims batch=1,seq=128]
//
// prints one JSON object on stdout:
//   {"peer": "onnxruntime", "version", "model", "level", "threads", "median_ms", "min_ms",
//    "times_ms", "peak_rss_bytes", "nodes"}
//
// Session: intraOpNumThreads = N, interOpNumThreads = 1, executionMode sequential, so the
// threads go to the kernels as in opfuse. Inputs are deterministic: N(0, 1) floats from a fixed
// seed, zeros for an input whose name contains "mask" (BERT's additive attention mask: every
// token visible). Symbolic dims take --dims, else batch=1 and seq=128 (opfuse's defaults).
// A run is timed around `await session.run(feeds)`, so it includes the binding's input/output
// copies and one setImmediate hop, which is small next to these models.
//
// "nodes" is the number of kernels one inference launches after the level's graph rewrites:
// a second session with the same options plus enableProfiling runs ONE inference, and the
// profile (Chrome trace JSON) holds one "Node" event named "<node>_kernel_time" per kernel
// executed; those are counted. The profiling session is made after the timed runs and their
// peak-RSS reading, so neither its cost nor its memory is measured. null if profiling fails.
//
// Errors: a message on stderr and exit status 1.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');

function fail(msg) {
  process.stderr.write(`ort_run: ${msg}\n`);
  process.exit(1);
}

const LEVELS = ['disabled', 'basic', 'extended', 'all'];
const DEFAULT_DIMS = {batch: 1, seq: 128};

function parseArgs(argv) {
  const a = {model: null, level: null, threads: 1, warmup: 3, repeat: 15, dims: {...DEFAULT_DIMS}};
  const intArg = (name, v, min) => {
    if (!/^\d+$/.test(v || '') || Number(v) < min) fail(`${name}: expected an integer >= ${min}, got ${v}`);
    return Number(v);
  };
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    const v = argv[i + 1];
    switch (k) {
      case '--level':
        if (!LEVELS.includes(v)) fail(`--level: expected one of ${LEVELS.join(', ')}, got ${v}`);
        a.level = v; ++i; break;
      case '--threads': a.threads = intArg(k, v, 1); ++i; break;
      case '--warmup': a.warmup = intArg(k, v, 0); ++i; break;
      case '--repeat': a.repeat = intArg(k, v, 1); ++i; break;
      case '--dims':
        for (const item of (v || '').split(',').filter(Boolean)) {
          const m = /^([A-Za-z_][\w]*)=(\d+)$/.exec(item);
          if (!m || Number(m[2]) < 1) fail(`--dims: expected NAME=N[,NAME=N...], got ${item}`);
          a.dims[m[1]] = Number(m[2]);
        }
        ++i; break;
      default:
        if (k.startsWith('--') || a.model !== null) fail(`unknown argument ${k}`);
        a.model = k;
    }
  }
  if (a.model === null || a.level === null) {
    fail('usage: ort_run.js MODEL.onnx --level disabled|basic|extended|all --threads N --warmup W --repeat R [--dims k=v,...]');
  }
  return a;
}

// splitmix32-style generator and Box-Muller: reproducible N(0, 1) values without dependencies.
function normalGenerator(seed) {
  let s = seed >>> 0;
  const u32 = () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
  const unit = () => (u32() + 0.5) / 4294967296;  // in (0, 1): log() below stays finite
  return () => Math.sqrt(-2 * Math.log(unit())) * Math.cos(2 * Math.PI * unit());
}

function makeFeeds(ort, session, dims) {
  const normal = normalGenerator(12345);
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const meta = session.inputMetadata[i];
    if (!meta.isTensor || meta.type !== 'float32') {
      fail(`input ${name}: only float32 tensor inputs are supported, got ${meta.type}`);
    }
    const shape = meta.shape.map((d) => {
      if (typeof d === 'number') return d;
      if (!(d in dims)) fail(`input ${name} has symbolic dim ${d}; bind it with --dims ${d}=N`);
      return dims[d];
    });
    const data = new Float32Array(shape.reduce((x, y) => x * y, 1));
    if (!name.includes('mask')) for (let j = 0; j < data.length; ++j) data[j] = normal();
    feeds[name] = new ort.Tensor('float32', data, shape);
  });
  return feeds;
}

function sessionOptions(a) {
  return {
    executionProviders: ['cpu'],
    graphOptimizationLevel: a.level,
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
  };
}

// Kernels launched by one inference, from ORT's profiler (see the header). The profile is
// written to a fresh temporary folder that is removed afterwards.
async function countNodes(ort, a) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ort_profile_'));
  try {
    const session = await ort.InferenceSession.create(a.model, {
      ...sessionOptions(a), enableProfiling: true, profileFilePrefix: path.join(dir, 'profile'),
    });
    await session.run(makeFeeds(ort, session, a.dims));
    session.endProfiling();  // writes the file; the binding returns nothing, so look it up
    await session.release();
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
    if (files.length !== 1) return null;
    const events = JSON.parse(fs.readFileSync(path.join(dir, files[0]), 'utf8'));
    return events.filter((e) => e.cat === 'Node' && e.name.endsWith('_kernel_time')).length;
  } catch (e) {
    process.stderr.write(`ort_run: node count unavailable: ${e.message}\n`);
    return null;
  } finally {
    fs.rmSync(dir, {recursive: true, force: true});
  }
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  if (!fs.existsSync(a.model)) fail(`no such file: ${a.model}`);
  let ort;
  try {
    ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));
  } catch (e) {
    fail(`cannot load onnxruntime-node (run npm install --ignore-scripts in ${__dirname}): ${e.message}`);
  }

  let session;
  try {
    session = await ort.InferenceSession.create(a.model, sessionOptions(a));
  } catch (e) {
    fail(`cannot create a session for ${a.model}: ${e.message}`);
  }
  const feeds = makeFeeds(ort, session, a.dims);

  const times = [];
  for (let i = 0; i < a.warmup + a.repeat; ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (i >= a.warmup) times.push(ms);
  }
  // maxRSS is in KiB; read it before the profiling session can raise it.
  const peakRss = process.resourceUsage().maxRSS * 1024;
  await session.release();

  const sorted = [...times].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;

  process.stdout.write(JSON.stringify({
    peer: 'onnxruntime',
    version: ort.env.versions.node,
    model: path.basename(a.model, '.onnx'),
    level: a.level,
    threads: a.threads,
    median_ms: median,
    min_ms: sorted[0],
    times_ms: times,
    peak_rss_bytes: peakRss,
    nodes: await countNodes(ort, a),
  }) + '\n');
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
