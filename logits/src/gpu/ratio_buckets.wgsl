// Pass 1 of mdsd-bounds' bucket selection for alpha* with i.i.d. drafts,
// one thread per token: each token's ratio bucket (mdsd_bounds::ratio_bucket,
// bit for bit) and the p and q mass per bucket. f64 has no atomics, so
// masses are added in 64-bit fixed point (units of 2^-62, p <= 1) as two
// u32 words with an explicit carry: exact whatever the order of the adds,
// each token truncated by less than 2^-62. Pass 2 gathers the tokens of
// the buckets the CPU marks as candidates.

struct Params {
    cols: u32,
    // Room for candidate tokens per row in `candidates`.
    capacity: u32,
}

const BUCKETS: u32 = 4098u;
// Bucket index = (bits of the clamped ratio >> (52 - 5)) - FIRST_FINITE + 1.
const FIRST_FINITE: u64 = 30688lu;
// 2^64 and the largest float below 2^-64: the clamp of the finite buckets.
const TOP_RATIO_BITS: u64 = 0x43F0000000000000lu;
const BELOW_MIN_RATIO_BITS: u64 = 0x3BEFFFFFFFFFFFFFlu;
// 2^62: probabilities to fixed point.
const FIXED_ONE: f64 = 4611686018427387904.0lf;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> target_probs: array<f64>;
@group(0) @binding(2) var<storage, read> draft_probs: array<f64>;
@group(0) @binding(3) var<storage, read_write> keys: array<u32>;
// Per row and bucket: p low, p high, q low, q high.
@group(0) @binding(4) var<storage, read_write> masses: array<atomic<u32>>;
// Per row and bucket: 1 where the CPU wants the bucket's tokens.
@group(0) @binding(5) var<storage, read> wanted: array<u32>;
// Per row: how many candidates were found (may exceed the capacity).
@group(0) @binding(6) var<storage, read_write> found: array<atomic<u32>>;
// Per row, `capacity` slots of (token, bucket).
@group(0) @binding(7) var<storage, read_write> candidates: array<vec2<u32>>;

fn ratio_bucket(p: f64, q: f64) -> u32 {
    // q = 0 sorts last whatever p is, as p/q = +inf (or NaN) clamps there.
    if q <= 0.0lf {
        return BUCKETS - 1u;
    }
    let ratio = min(p / q, bitcast<f64>(TOP_RATIO_BITS));
    let clamped = max(ratio, bitcast<f64>(BELOW_MIN_RATIO_BITS));
    return u32((bitcast<u64>(clamped) >> 47u) - (FIRST_FINITE - 1lu));
}

fn add_fixed(slot: u32, value: f64) {
    let fixed = u64(value * FIXED_ONE);
    let low = u32(fixed & 0xFFFFFFFFlu);
    let high = u32(fixed >> 32u);
    let before = atomicAdd(&masses[slot], low);
    let carry = select(0u, 1u, before + low < before);
    atomicAdd(&masses[slot + 1u], high + carry);
}

@compute @workgroup_size(256)
fn bucket_masses(@builtin(global_invocation_id) id: vec3<u32>) {
    let token = id.x;
    if token >= params.cols {
        return;
    }
    let row = id.y;
    let at = row * params.cols + token;
    let p = target_probs[at];
    let q = draft_probs[at];
    let bucket = ratio_bucket(p, q);
    keys[at] = bucket;
    let slot = (row * BUCKETS + bucket) * 4u;
    if p > 0.0lf {
        add_fixed(slot, p);
    }
    if q > 0.0lf {
        add_fixed(slot + 2u, q);
    }
}

@compute @workgroup_size(256)
fn gather_candidates(@builtin(global_invocation_id) id: vec3<u32>) {
    let token = id.x;
    if token >= params.cols {
        return;
    }
    let row = id.y;
    let bucket = keys[row * params.cols + token];
    if wanted[row * BUCKETS + bucket] != 0u {
        let slot = atomicAdd(&found[row], 1u);
        if slot < params.capacity {
            candidates[row * params.capacity + slot] = vec2<u32>(token, bucket);
        }
    }
}
