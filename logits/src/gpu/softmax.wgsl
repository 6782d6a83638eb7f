// Stable softmax of one row per workgroup, in f64 (SHADER_F64 and
// SHADER_INT64), as mdsd-core's Distribution::from_logits: subtract the
// row's max, exp((x - max) / T), divide by the f64 sum; T = 0 gives the
// one-hot of the first maximum. NaN and +inf are refused (status 1 with
// the first such index); a row of -inf only is refused too (status 2).

struct Params {
    cols: u32,
    temperature: f64,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f64>;
@group(0) @binding(2) var<storage, read_write> probs: array<f64>;
// Per row: (status, index).
@group(0) @binding(3) var<storage, read_write> status: array<vec2<u32>>;

const THREADS: u32 = 256u;
const NEG_INF_BITS: u64 = 0xFFF0000000000000lu;
const EXPONENT_BITS: u64 = 0x7FF0000000000000lu;
const NO_INDEX: u32 = 0xFFFFFFFFu;

var<workgroup> reduce_f64: array<f64, THREADS>;
var<workgroup> reduce_u32: array<u32, THREADS>;

fn neg_inf() -> f64 {
    return bitcast<f64>(NEG_INF_BITS);
}

// NaN or +inf: all exponent bits set and not -inf.
fn is_bad(x: f64) -> bool {
    let bits = bitcast<u64>(x);
    return (bits & EXPONENT_BITS) == EXPONENT_BITS && bits != NEG_INF_BITS;
}

// 2^k for a normal result (-1022 <= k <= 1023), from the bit pattern.
fn exp2_int(k: i32) -> f64 {
    return bitcast<f64>(u64(k + 1023) << 52u);
}

// e^y for y <= 0. Vulkan has no f64 exp (GLSL.std.450 Exp is 32-bit at
// most), so: y = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite: ln2 split in
// a high part with trailing zero bits, so k * LN2_HI is exact), e^r by
// its Taylor series to r^13 (remainder below 1e-17 relative), times 2^k
// in two normal halves so that subnormal results come out right too.
fn exp_nonpositive(y: f64) -> f64 {
    if y < -746.0lf {
        return 0.0lf;
    }
    let k = floor(y * 1.4426950408889634lf + 0.5lf);
    let r = (y - k * 6.93147180369123816490e-01lf) - k * 1.90821492927058770002e-10lf;
    var series = 1.0lf / 6227020800.0lf;
    series = series * r + 1.0lf / 479001600.0lf;
    series = series * r + 1.0lf / 39916800.0lf;
    series = series * r + 1.0lf / 3628800.0lf;
    series = series * r + 1.0lf / 362880.0lf;
    series = series * r + 1.0lf / 40320.0lf;
    series = series * r + 1.0lf / 5040.0lf;
    series = series * r + 1.0lf / 720.0lf;
    series = series * r + 1.0lf / 120.0lf;
    series = series * r + 1.0lf / 24.0lf;
    series = series * r + 1.0lf / 6.0lf;
    series = series * r + 0.5lf;
    series = series * r + 1.0lf;
    series = series * r + 1.0lf;
    let half = i32(k) / 2;
    return series * exp2_int(half) * exp2_int(i32(k) - half);
}

fn reduce_max(lid: u32, value: f64) -> f64 {
    reduce_f64[lid] = value;
    workgroupBarrier();
    for (var stride = THREADS / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            reduce_f64[lid] = max(reduce_f64[lid], reduce_f64[lid + stride]);
        }
        workgroupBarrier();
    }
    let out = reduce_f64[0];
    workgroupBarrier();
    return out;
}

fn reduce_sum(lid: u32, value: f64) -> f64 {
    reduce_f64[lid] = value;
    workgroupBarrier();
    for (var stride = THREADS / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            reduce_f64[lid] = reduce_f64[lid] + reduce_f64[lid + stride];
        }
        workgroupBarrier();
    }
    let out = reduce_f64[0];
    workgroupBarrier();
    return out;
}

fn reduce_min_index(lid: u32, value: u32) -> u32 {
    reduce_u32[lid] = value;
    workgroupBarrier();
    for (var stride = THREADS / 2u; stride > 0u; stride = stride / 2u) {
        if lid < stride {
            reduce_u32[lid] = min(reduce_u32[lid], reduce_u32[lid + stride]);
        }
        workgroupBarrier();
    }
    let out = reduce_u32[0];
    workgroupBarrier();
    return out;
}

@compute @workgroup_size(256)
fn softmax(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols = params.cols;
    let base = group.x * cols;

    var local_max = neg_inf();
    var first_bad = NO_INDEX;
    for (var i = lid; i < cols; i += THREADS) {
        let x = logits[base + i];
        if is_bad(x) {
            first_bad = min(first_bad, i);
        } else {
            local_max = max(local_max, x);
        }
    }
    let bad = reduce_min_index(lid, first_bad);
    let row_max = reduce_max(lid, local_max);
    // Uniform across the workgroup: every thread returns together.
    if bad != NO_INDEX || bitcast<u64>(row_max) == NEG_INF_BITS {
        if lid == 0u {
            status[group.x] = select(vec2<u32>(2u, 0u), vec2<u32>(1u, bad), bad != NO_INDEX);
        }
        return;
    }

    if params.temperature == 0.0lf {
        var first_max = NO_INDEX;
        for (var i = lid; i < cols; i += THREADS) {
            if logits[base + i] == row_max {
                first_max = min(first_max, i);
            }
        }
        let argmax = reduce_min_index(lid, first_max);
        for (var i = lid; i < cols; i += THREADS) {
            probs[base + i] = select(0.0lf, 1.0lf, i == argmax);
        }
    } else {
        var local_sum = 0.0lf;
        for (var i = lid; i < cols; i += THREADS) {
            let weight = exp_nonpositive((logits[base + i] - row_max) / params.temperature);
            probs[base + i] = weight;
            local_sum += weight;
        }
        let total = reduce_sum(lid, local_sum);
        for (var i = lid; i < cols; i += THREADS) {
            probs[base + i] = probs[base + i] / total;
        }
    }
    if lid == 0u {
        status[group.x] = vec2<u32>(0u, 0u);
    }
}
