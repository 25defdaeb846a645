// The fused kernels of the laya-cuda forward pass (model.md §3), compiled by NVRTC when the
// engine starts (compile.rs). The GEMMs are cuBLASLt's, but for short passes' on Hopper
// (gemm_wg, where it gives cuBLASLt's bits); everything between them is here.
//
// Half values travel as raw 16-bit patterns and are converted with PTX `cvt`, so the source
// needs no CUDA header and compiles with any NVRTC. Row layout everywhere: tokens of all rows
// packed back to back, one matrix row per token, row-major.

typedef unsigned short f16;
typedef unsigned int u32;

#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float h2f(f16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ f16 f2h(float f) {
    f16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
// Two halves in one register, the lower column in the low bits (the mma fragment order).
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    return (u32)f2h(lo) | ((u32)f2h(hi) << 16);
}
__device__ __forceinline__ float lo_f(u32 v) { return h2f((f16)(v & 0xffffu)); }
__device__ __forceinline__ float hi_f(u32 v) { return h2f((f16)(v >> 16)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// PyTorch's exact GELU: x/2 · (1 + erf(x/√2)).
__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// Programmatic dependent launch (Hopper on): a kernel that feeds a GEMM of ours lets it be
// launched while its own blocks still run (`pdl_release`, at its start); that GEMM, launched
// with the attribute, reads its weights meanwhile and waits (`pdl_wait`) for this kernel to
// finish, and its writes to land, before it reads anything this kernel wrote. Without the
// attribute both are no-ops, so every other launch keeps the stream's plain order.
__device__ __forceinline__ void pdl_release() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------
// Row norms: one warp per row of d values (d % 8 == 0, d ≤ 256·MAXC), each lane holding 8
// consecutive values of every 256-wide chunk, so loads are 16-byte and coalesced. A chunk
// past the row's end (d = 128: lanes 16-31) holds zeros and adds nothing to the statistics.

// Chunks a row register array holds: set per model by compile.rs (hidden ≤ 256·LAYA_MAXC).
#ifndef LAYA_MAXC
#define LAYA_MAXC 8
#endif
#define MAXC LAYA_MAXC
#define LIVE(c) ((c) < nc && (c) * 256 + lane * 8 < d)

__device__ __forceinline__ void load_row_f32(const float* __restrict__ src, int d, int nc, int lane, float* v) {
#pragma unroll
    for (int c = 0; c < MAXC; ++c) {
        if (LIVE(c)) {
            const float4* p = reinterpret_cast<const float4*>(src + c * 256 + lane * 8);
            float4 a = p[0], b = p[1];
            v[c * 8 + 0] = a.x; v[c * 8 + 1] = a.y; v[c * 8 + 2] = a.z; v[c * 8 + 3] = a.w;
            v[c * 8 + 4] = b.x; v[c * 8 + 5] = b.y; v[c * 8 + 6] = b.z; v[c * 8 + 7] = b.w;
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[c * 8 + e] = 0.f;
        }
    }
}

__device__ __forceinline__ void load_row_f16(const f16* __restrict__ src, int d, int nc, int lane, float* v) {
#pragma unroll
    for (int c = 0; c < MAXC; ++c) {
        if (LIVE(c)) {
            uint4 a = *reinterpret_cast<const uint4*>(src + c * 256 + lane * 8);
            v[c * 8 + 0] = lo_f(a.x); v[c * 8 + 1] = hi_f(a.x);
            v[c * 8 + 2] = lo_f(a.y); v[c * 8 + 3] = hi_f(a.y);
            v[c * 8 + 4] = lo_f(a.z); v[c * 8 + 5] = hi_f(a.z);
            v[c * 8 + 6] = lo_f(a.w); v[c * 8 + 7] = hi_f(a.w);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) v[c * 8 + e] = 0.f;
        }
    }
}

__device__ __forceinline__ void store_row_f32(float* __restrict__ dst, int d, int nc, int lane, const float* v) {
#pragma unroll
    for (int c = 0; c < MAXC; ++c) {
        if (LIVE(c)) {
            float4* p = reinterpret_cast<float4*>(dst + c * 256 + lane * 8);
            p[0] = make_float4(v[c * 8 + 0], v[c * 8 + 1], v[c * 8 + 2], v[c * 8 + 3]);
            p[1] = make_float4(v[c * 8 + 4], v[c * 8 + 5], v[c * 8 + 6], v[c * 8 + 7]);
        }
    }
}

__device__ __forceinline__ void store_row_f16(f16* __restrict__ dst, int d, int nc, int lane, const float* v) {
#pragma unroll
    for (int c = 0; c < MAXC; ++c) {
        if (LIVE(c)) {
            uint4 a;
            a.x = pack2(v[c * 8 + 0], v[c * 8 + 1]);
            a.y = pack2(v[c * 8 + 2], v[c * 8 + 3]);
            a.z = pack2(v[c * 8 + 4], v[c * 8 + 5]);
            a.w = pack2(v[c * 8 + 6], v[c * 8 + 7]);
            *reinterpret_cast<uint4*>(dst + c * 256 + lane * 8) = a;
        }
    }
}

// LayerNorm in place, f32 two-pass statistics over the row's d values; `b` may be null (the
// encoder's norms have no bias).
__device__ __forceinline__ void layer_norm(float* v, int d, int nc, int lane, const float* __restrict__ w,
                                           const float* __restrict__ b, float eps) {
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (LIVE(c))
#pragma unroll
            for (int e = 0; e < 8; ++e) s += v[c * 8 + e];
    const float mean = warp_sum(s) / (float)d;
    float q = 0.f;
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (LIVE(c))
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                float t = v[c * 8 + e] - mean;
                q += t * t;
            }
    const float rstd = 1.0f / sqrtf(warp_sum(q) / (float)d + eps);
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (LIVE(c)) {
            const int col = c * 256 + lane * 8;
            const float4 w0 = *reinterpret_cast<const float4*>(w + col);
            const float4 w1 = *reinterpret_cast<const float4*>(w + col + 4);
            const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
            float bv[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            if (b) {
                const float4 b0 = *reinterpret_cast<const float4*>(b + col);
                const float4 b1 = *reinterpret_cast<const float4*>(b + col + 4);
                bv[0] = b0.x; bv[1] = b0.y; bv[2] = b0.z; bv[3] = b0.w;
                bv[4] = b1.x; bv[5] = b1.y; bv[6] = b1.z; bv[7] = b1.w;
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) v[c * 8 + e] = (v[c * 8 + e] - mean) * rstd * wv[e] + bv[e];
        }
}

#define ROW_SETUP                                                        \
    pdl_release();                                                       \
    const int lane = threadIdx.x & 31;                                   \
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); \
    if (row >= n) return;                                                \
    const int nc = (d + 255) >> 8;                                               \
    float v[MAXC * 8];

// §3.1 step 1: x = LayerNorm(tok_embeddings[id]); also x in f16, layer 0's attention input
// (layer 0 has no attn_norm).
extern "C" __global__ void embed_norm(const u32* __restrict__ ids, const f16* __restrict__ emb,
                                      const float* __restrict__ w, float* __restrict__ x,
                                      f16* __restrict__ a, int n, int d, float eps) {
    ROW_SETUP
    load_row_f16(emb + (size_t)ids[row] * d, d, nc, lane, v);
    layer_norm(v, d, nc, lane, w, 0, eps);
    store_row_f32(x + (size_t)row * d, d, nc, lane, v);
    store_row_f16(a + (size_t)row * d, d, nc, lane, v);
}

// y = f16(LayerNorm(x)): the input of the next 16-bit GEMM.
extern "C" __global__ void norm_f16(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ b, f16* __restrict__ y, int n, int d,
                                    float eps) {
    ROW_SETUP
    load_row_f32(x + (size_t)row * d, d, nc, lane, v);
    layer_norm(v, d, nc, lane, w, b, eps);
    store_row_f16(y + (size_t)row * d, d, nc, lane, v);
}

// y = LayerNorm(x) in f32 (the scorer's norm).
extern "C" __global__ void norm_f32(const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ b, float* __restrict__ y, int n, int d,
                                    float eps) {
    ROW_SETUP
    load_row_f32(x + (size_t)row * d, d, nc, lane, v);
    layer_norm(v, d, nc, lane, w, b, eps);
    store_row_f32(y + (size_t)row * d, d, nc, lane, v);
}

// §3.1 step 3 and §3.2, then the first head layer's norm1: h = final_norm(x) +
// type_emb[qtype], y = f16(norm1(h)).
extern "C" __global__ void final_norm(const float* __restrict__ x, const float* __restrict__ wf,
                                      const float* __restrict__ type_emb, const int* __restrict__ qtype,
                                      float* __restrict__ h, const float* __restrict__ w1,
                                      const float* __restrict__ b1, f16* __restrict__ y, int n, int d,
                                      float eps, float head_eps) {
    ROW_SETUP
    load_row_f32(x + (size_t)row * d, d, nc, lane, v);
    layer_norm(v, d, nc, lane, wf, 0, eps);
    const float* te = type_emb + (size_t)qtype[row] * d;
#pragma unroll
    for (int c = 0; c < MAXC; ++c)
        if (LIVE(c))
#pragma unroll
            for (int e = 0; e < 8; ++e) v[c * 8 + e] += te[c * 256 + lane * 8 + e];
    store_row_f32(h + (size_t)row * d, d, nc, lane, v);
    layer_norm(v, d, nc, lane, w1, b1, head_eps);
    store_row_f16(y + (size_t)row * d, d, nc, lane, v);
}

// The last head layer at the selected positions only: hs = h[sel], y = f16(norm1(hs)).
extern "C" __global__ void gather_norm(const float* __restrict__ h, const int* __restrict__ sel,
                                       float* __restrict__ hs, const float* __restrict__ w,
                                       const float* __restrict__ b, f16* __restrict__ y, int n, int d,
                                       float eps) {
    ROW_SETUP
    load_row_f32(h + (size_t)sel[row] * d, d, nc, lane, v);
    store_row_f32(hs + (size_t)row * d, d, nc, lane, v);
    layer_norm(v, d, nc, lane, w, b, eps);
    store_row_f16(y + (size_t)row * d, d, nc, lane, v);
}

// ---------------------------------------------------------------------------------------
// GeGLU: g = GELU(wi[:, :I]) ⊙ wi[:, I:], 8 values per thread (I % 8 == 0).
// Block (t, y) covers token t's columns from y · blockDim · 8: the token comes from the grid,
// not from a 64-bit division of a flat index, which cost about as much as the GELUs.
extern "C" __global__ void geglu(const f16* __restrict__ wi, f16* __restrict__ g, int n, int inter) {
    pdl_release();
    const size_t t = blockIdx.x;
    const int i = (blockIdx.y * blockDim.x + threadIdx.x) * 8;
    if ((int)t >= n || i >= inter) return;
    const uint4 a = *reinterpret_cast<const uint4*>(wi + t * 2 * inter + i);
    const uint4 b = *reinterpret_cast<const uint4*>(wi + t * 2 * inter + inter + i);
    uint4 r;
    r.x = pack2(gelu_erf(lo_f(a.x)) * lo_f(b.x), gelu_erf(hi_f(a.x)) * hi_f(b.x));
    r.y = pack2(gelu_erf(lo_f(a.y)) * lo_f(b.y), gelu_erf(hi_f(a.y)) * hi_f(b.y));
    r.z = pack2(gelu_erf(lo_f(a.z)) * lo_f(b.z), gelu_erf(hi_f(a.z)) * hi_f(b.z));
    r.w = pack2(gelu_erf(lo_f(a.w)) * lo_f(b.w), gelu_erf(hi_f(a.w)) * hi_f(b.w));
    *reinterpret_cast<uint4*>(g + t * inter + i) = r;
}

// ---------------------------------------------------------------------------------------
// Attention. Each query i attends to keys j of its own row, [tok_start[i], tok_end[i]), and
// with `window` ≥ 0 (sliding layers) only |i − j| ≤ window. Token indices are packed, so
// inside a row they differ exactly as sequence positions do. Heads are 64 wide; q, k and v
// are column blocks of one buffer with row stride `ld` (the fused Wqkv output). RoPE
// (`rope_cos`/`rope_sin` = [position][32] tables, null for the decision head) is applied to
// q and k as they are loaded.

#define HD 64
#define BQ 64
#define BK 64
#define SROW 72  // shared-memory row stride in halves: 144 bytes, ldmatrix without bank conflicts

__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
__device__ __forceinline__ void ldsm_x4(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(u32* r, const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
// c += a · b for one m16n8k16 tile, f16 inputs, f32 accumulators. Registers in and out
// only, so not volatile: the compiler may interleave it with the loads and the softmax.
__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x by the special-function unit alone. exp2f gives the same value wherever 2^x is at
// least 2^-126 and a subnormal below; this gives 0 there. Attention's probabilities below
// 2^-126 become 0 as f16 either way. A lane's partial row sum can differ by such a value,
// but the row's total adds up the partial sums of its four lanes, one of which holds the
// row's maximum (a probability of 1): a difference below 2^-126 vanishes in that sum.
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ void unpack8(const uint4& a, float* x) {
    x[0] = lo_f(a.x); x[1] = hi_f(a.x); x[2] = lo_f(a.y); x[3] = hi_f(a.y);
    x[4] = lo_f(a.z); x[5] = hi_f(a.z); x[6] = lo_f(a.w); x[7] = hi_f(a.w);
}
__device__ __forceinline__ uint4 pack8(const float* x) {
    uint4 a;
    a.x = pack2(x[0], x[1]); a.y = pack2(x[2], x[3]); a.z = pack2(x[4], x[5]); a.w = pack2(x[6], x[7]);
    return a;
}
__device__ __forceinline__ void load8f(const float* __restrict__ p, float* x) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w; x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
}
// RoPE on dims [c8, c8 + 8) (x1) and their partners [c8 + 32, c8 + 40) (x2) of one head at
// position `ps`: x1' = x1·cos − x2·sin, x2' = x2·cos + x1·sin.
// One rotated pair, every RoPE here (rope_qk, attention_rows, gemm_wg's epilogue). Its
// roundings are spelled out: left to the compiler, the products were fused into the adds one
// way in rope_qk and another in gemm_wg's epilogue, and the same rotation gave other last
// bits. These are the ones rope_qk's code had (x1 = a·c − ⌊b·s⌉, x2 = a·s + ⌊b·c⌉).
__device__ __forceinline__ void rope_pair(float& x1, float& x2, float c, float sn) {
    const float a = x1, b = x2;
    x1 = __fmaf_rn(a, c, -__fmul_rn(b, sn));
    x2 = __fmaf_rn(a, sn, __fmul_rn(b, c));
}

__device__ __forceinline__ void rope8(float* x1, float* x2, int ps, int c8, const float* __restrict__ rc,
                                      const float* __restrict__ rs) {
    float c[8], sn[8];
    load8f(rc + ps * 32 + c8, c);
    load8f(rs + ps * 32 + c8, sn);
#pragma unroll
    for (int e = 0; e < 8; ++e) rope_pair(x1[e], x2[e], c[e], sn[e]);
}

// RoPE in place on the query and key blocks of the fused Wqkv output (row stride `ld`,
// keys `d` columns after the queries): one thread per (token, head, q or k, 8 of the first 32
// dims and their partners 32 further). Runs before the tensor-core attention, whose tile
// loads are then plain asynchronous copies.
extern "C" __global__ void rope_qk(f16* __restrict__ qkv, int ld, int d, const int* __restrict__ tok_pos,
                                   const float* __restrict__ rc, const float* __restrict__ rs, int n,
                                   int heads) {
    pdl_release();
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    const int per_tok = heads * 8;
    if (idx >= n * per_tok) return;
    const int t = idx / per_tok, rem = idx % per_tok;
    const int h = rem >> 3, which = (rem >> 2) & 1, c8 = (rem & 3) * 8;
    f16* p = qkv + (size_t)t * ld + which * d + h * HD;
    float x1[8], x2[8];
    unpack8(*reinterpret_cast<const uint4*>(p + c8), x1);
    unpack8(*reinterpret_cast<const uint4*>(p + c8 + 32), x2);
    rope8(x1, x2, tok_pos[t], c8, rc, rs);
    *reinterpret_cast<uint4*>(p + c8) = pack8(x1);
    *reinterpret_cast<uint4*>(p + c8 + 32) = pack8(x2);
}

// 16-byte asynchronous copy global → shared; `bytes` = 0 fills zeros without reading.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N)); }

// Queues the copy of rows [r0, r0 + 64) ∩ [.., rend) of one head (64 halves at `col`) into a
// shared tile; rows at or past `rend` become zeros.
__device__ __forceinline__ void tile_async(f16* s, const f16* __restrict__ src, int ld, int col, int r0,
                                           int rend, int tid) {
#pragma unroll
    for (int it = 0; it < 4; ++it) {
        const int idx = tid + it * 128;
        const int r = idx >> 3, c8 = (idx & 7) * 8, row = r0 + r;
        const bool ok = row < rend;
        cp_async16(s + r * SROW + c8, src + (size_t)(ok ? row : 0) * ld + col + c8, ok ? 16 : 0);
    }
}

// Queues this thread's share of the key and value rows [r0, r0 + 64) ∩ [.., rend) of one
// head: rows sr, sr + 16, sr + 32, sr + 48 at the columns `k` and `v` already point to (this
// thread's 8 of the head's 64), into the shared tiles whose matching pieces start at the
// shared addresses `dk` and `dv`. Rows at or past `rend` become zeros. One row offset serves
// both copies, so a piece costs a multiply-add and two copies rather than a full address
// computation each.
__device__ __forceinline__ void kv_async(u32 dk, u32 dv, const f16* __restrict__ k, const f16* __restrict__ v,
                                         int ld, int r0, int rend, int sr) {
#pragma unroll
    for (int it = 0; it < 4; ++it) {
        const int row = r0 + sr + it * 16;
        const bool ok = row < rend;
        const size_t off = (size_t)(ok ? row : 0) * ld;
        const int bytes = ok ? 16 : 0;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dk + it * 16 * SROW * 2), "l"(k + off), "r"(bytes));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dv + it * 16 * SROW * 2), "l"(v + off), "r"(bytes));
    }
}

// The keys a query tile [q0, qend) of the row [rs, re) reaches end at `khi`; the key tiles
// covering them, aligned to the row's start, are `ntiles` from `kt0`.
__device__ __forceinline__ void tile_keys(int q0, int qend, int rs, int re, int window, int& khi, int& kt0,
                                          int& ntiles) {
    int klo = rs;
    khi = re;
    if (window >= 0) {
        klo = max(rs, q0 - window);
        khi = min(re, qend - 1 + window + 1);
    }
    kt0 = rs + ((klo - rs) / BK) * BK;
    ntiles = (khi - kt0 + BK - 1) / BK;
}

// The key range of query `qi` of a row [rs, re) (`window` ≥ 0: sliding layers), empty for a
// query past the tile's end `qend`.
__device__ __forceinline__ void query_keys(int qi, int qend, int rs, int re, int window, int& lo, int& hi) {
    lo = hi = 0;
    if (qi < qend) {
        lo = window >= 0 ? max(rs, qi - window) : rs;
        hi = window >= 0 ? min(re, qi + window + 1) : re;
    }
}

// One key tile's step of the online softmax for a warp's 16 queries, shared by both
// tensor-core kernels: the scores `s` (the m16n8 accumulator layout: rows qi0 and qi1 of this
// thread, columns j·8 + (lane % 4)·2 + e % 2 of the tile starting at key `kt`) are scaled,
// masked to [lo, hi) of each row unless `whole`, and turned into probabilities; the running
// maxima `m` and sums `l` move on, and `al` is the factor the outputs so far take
// (rescale_rows). P stays in `s` as f32 (pack_p).
__device__ __forceinline__ void softmax_probs(float (&s)[8][4], float& m0, float& m1, float& l0,
                                              float& l1, float& al0, float& al1, bool whole, int kt, int lo0,
                                              int hi0, int lo1, int hi1, float sl2, int lane) {
    if (whole) {
        // __fmul_rn: the product is rounded on its own, never fused with the subtraction
        // below, as in the masked branch.
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[j][e] = __fmul_rn(s[j][e], sl2);
    } else {
        // Relative to this thread's first column of the tile, [a, b) is visible.
        const int kb = kt + (lane & 3) * 2;
        const int a0 = lo0 - kb, b0 = hi0 - kb, a1 = lo1 - kb, b1 = hi1 - kb;
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = j * 8 + (e & 1);
                const bool ok = e < 2 ? (c >= a0 && c < b0) : (c >= a1 && c < b1);
                s[j][e] = ok ? __fmul_rn(s[j][e], sl2) : NEG_INF;
            }
    }
    // Each row's largest score as a tree (a maximum is exact in any order), so the chain of
    // dependent steps is 4 long, not 16.
    float t0[8], t1[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        t0[j] = fmaxf(s[j][0], s[j][1]);
        t1[j] = fmaxf(s[j][2], s[j][3]);
    }
#pragma unroll
    for (int w = 4; w > 0; w >>= 1)
#pragma unroll
        for (int j = 0; j < w; ++j) {
            t0[j] = fmaxf(t0[j], t0[j + w]);
            t1[j] = fmaxf(t1[j], t1[j + w]);
        }
    float mx0 = t0[0], mx1 = t1[0];
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    // A row with no key yet keeps a finite base, so no −inf − −inf.
    const float base0 = mn0 == NEG_INF ? 0.f : mn0, base1 = mn1 == NEG_INF ? 0.f : mn1;
    al0 = exp2f(m0 - base0);
    al1 = exp2f(m1 - base1);
    m0 = mn0;
    m1 = mn1;
    float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float p = ex2_ftz(s[j][e] - (e < 2 ? base0 : base1));
            s[j][e] = p;
            if (e < 2) rs0 += p;
            else rs1 += p;
        }
    l0 = l0 * al0 + rs0;
    l1 = l1 * al1 + rs1;
}

// P (softmax_probs' `s`) as f16 A fragments of P·V, one set for each 16 keys.
__device__ __forceinline__ void pack_p(const float (&s)[8][4], u32 (&pa)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        pa[kk][0] = pack2(s[2 * kk][0], s[2 * kk][1]);
        pa[kk][1] = pack2(s[2 * kk][2], s[2 * kk][3]);
        pa[kk][2] = pack2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[kk][3] = pack2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

// The outputs so far times each row's factor from softmax_probs. Once a row's maximum settles
// its factor is exactly 1: the rescale is skipped when it is 1 for every row of the warp.
__device__ __forceinline__ void rescale_rows(float (&o)[8][4], float al0, float al1) {
    if (__any_sync(0xffffffffu, al0 != 1.f || al1 != 1.f)) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            o[j][0] *= al0;
            o[j][1] *= al0;
            o[j][2] *= al1;
            o[j][3] *= al1;
        }
    }
}

// Normalises a warp's outputs by the rows' sums and writes them (rows qi0, qi1 of this
// thread; columns from `col`).
__device__ __forceinline__ void attention_store(const float (&o)[8][4], float l0, float l1, f16* __restrict__ out,
                                                int out_ld, int col, int qi0, int qi1, int qend, int lane) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int c = col + j * 8 + (lane & 3) * 2;
        if (qi0 < qend) *reinterpret_cast<u32*>(out + (size_t)qi0 * out_ld + c) = pack2(o[j][0] * inv0, o[j][1] * inv0);
        if (qi1 < qend) *reinterpret_cast<u32*>(out + (size_t)qi1 * out_ld + c) = pack2(o[j][2] * inv1, o[j][3] * inv1);
    }
}

// Flash-attention on tensor cores (RoPE already applied, see rope_qk): one block = one query
// tile of `tiles` (up to 64 tokens of one row) × one head, 4 warps of 16 queries. Keys run in
// tiles of 64 counted from the row's start, double-buffered with asynchronous copies; online
// softmax in f32 (base 2), P rounded to f16 for P·V as fused attention kernels do. A query's
// result depends only on its own row, not on the rows packed around it.
//
// Most of a tile's instructions are the softmax's, not the tensor cores': a key tile that
// every query of a warp sees whole skips the mask (warp-uniform), and the probabilities'
// exp2 is the bare special-function instruction (ex2_ftz). Both leave every bit as it was.
// Blocks a multiprocessor should hold (compile.rs sets it per architecture).
#ifndef LAYA_ATT_BLOCKS
#define LAYA_ATT_BLOCKS 2
#endif
extern "C" __global__ void __launch_bounds__(128, LAYA_ATT_BLOCKS)
attention_mma(const f16* __restrict__ q, const f16* __restrict__ k, const f16* __restrict__ v, int ld,
              f16* __restrict__ out, int out_ld, const int* __restrict__ tiles,
              const int* __restrict__ tok_start, const int* __restrict__ tok_end, int window, float scale) {
    pdl_release();
    __shared__ __align__(16) f16 sq[BQ * SROW];
    __shared__ __align__(16) f16 sk[2][BK * SROW];
    __shared__ __align__(16) f16 sv[2][BK * SROW];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = tiles[blockIdx.x];
    if (q0 < 0) return;
    const int col = blockIdx.y * HD;
    const int rs = tok_start[q0], re = tok_end[q0];
    const int qend = min(q0 + BQ, re);
    int khi, kt0, ntiles;
    tile_keys(q0, qend, rs, re, window, khi, kt0, ntiles);

    // This thread's pieces of the key and value tiles: rows tid / 8 + 16·i, columns c8.
    const int sr = tid >> 3, c8 = (tid & 7) * 8;
    const f16* kc = k + col + c8;
    const f16* vc = v + col + c8;
    const u32 dk0 = smem_addr(&sk[0][sr * SROW + c8]), dv0 = smem_addr(&sv[0][sr * SROW + c8]);
    constexpr u32 STAGE = BK * SROW * 2;  // bytes between the two stages of sk (and of sv)

    tile_async(sq, q, ld, col, q0, qend, tid);
    cp_async_commit();
    if (ntiles > 0) kv_async(dk0, dv0, kc, vc, ld, kt0, khi, sr);
    cp_async_commit();

    // This thread's two query rows (the m16n8 accumulator layout) and their key ranges.
    const int qi0 = q0 + warp * 16 + (lane >> 2), qi1 = qi0 + 8;
    int lo0, hi0, lo1, hi1;
    query_keys(qi0, qend, rs, re, window, lo0, hi0);
    query_keys(qi1, qend, rs, re, window, lo1, hi1);
    // The keys all 16 queries of this warp see, [flo, fhi) (none unless the warp's 16
    // queries are all in the tile): a query's keys are one interval whose ends grow with the
    // query, so the warp's last query bounds them below and its first above. (Written out in
    // both kernels: as a helper, ptxas laid out one or the other differently.)
    const int wq0 = q0 + warp * 16;
    int flo = 1, fhi = 0;
    if (wq0 + 16 <= qend) {
        flo = window >= 0 ? max(rs, wq0 + 15 - window) : rs;
        fhi = window >= 0 ? min(re, wq0 + window + 1) : re;
    }

    cp_async_wait<1>();
    __syncthreads();
    u32 qa[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) ldsm_x4(qa[kk], &sq[(warp * 16 + (lane & 15)) * SROW + kk * 16 + (lane >> 4) * 8]);

    float o[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    const float sl2 = scale * 1.4426950408889634f;

    for (int m = 0; m < ntiles; ++m) {
        const int kt = kt0 + m * BK, st = m & 1;
        if (m + 1 < ntiles) kv_async(dk0 + (st ^ 1) * STAGE, dv0 + (st ^ 1) * STAGE, kc, vc, ld, kt + BK, khi, sr);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int k2 = 0; k2 < 2; ++k2) {
                u32 b[4];
                ldsm_x4(b, &sk[st][(j * 8 + (lane & 7)) * SROW + k2 * 32 + (lane >> 3) * 8]);
                mma16816(s[j], qa[k2 * 2], b[0], b[1]);
                mma16816(s[j], qa[k2 * 2 + 1], b[2], b[3]);
            }
        }

        u32 pa[4][4];
        float al0, al1;
        softmax_probs(s, m0, m1, l0, l1, al0, al1, kt >= flo && kt + BK <= fhi, kt, lo0, hi0, lo1, hi1, sl2, lane);
        rescale_rows(o, al0, al1);
        pack_p(s, pa);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int dd = 0; dd < 4; ++dd) {
                u32 b[4];
                ldsm_x4_t(b, &sv[st][(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * SROW + dd * 16 + (lane >> 4) * 8]);
                mma16816(o[dd * 2], pa[kk], b[0], b[1]);
                mma16816(o[dd * 2 + 1], pa[kk], b[2], b[3]);
            }
        // Everyone is done with this stage before the next iteration refills it.
        __syncthreads();
    }

    attention_store(o, l0, l1, out, out_ld, col, qi0, qi1, qend, lane);
}

// One head's 64 dims of row `row` as f32, rotated when a RoPE table is given.
__device__ __forceinline__ void load_head(const f16* __restrict__ p, float* x, int ps,
                                          const float* __restrict__ rc, const float* __restrict__ rs) {
#pragma unroll
    for (int c = 0; c < 8; ++c) unpack8(*reinterpret_cast<const uint4*>(p + c * 8), x + c * 8);
    if (rc) {
#pragma unroll
        for (int c = 0; c < 4; ++c) rope8(x + c * 8, x + 32 + c * 8, ps, c * 8, rc, rs);
    }
}

// Attention one block of 4 warps per (query, head): the 128 threads take the query's keys
// in turn, each keeping its own online softmax over f32 scores, merged across the block at
// the end. The plain reference path (`Attention::Rows`): for the dense layers (`q_tok` null:
// query i is token i, RoPE applied here when given) and for the last head layer's scattered
// queries (`q_tok` maps query i to its token), which attention_sel serves otherwise.
extern "C" __global__ void __launch_bounds__(128)
attention_rows(const f16* __restrict__ q, int q_ld, const int* __restrict__ q_tok, const f16* __restrict__ k,
               const f16* __restrict__ v, int kv_ld, f16* __restrict__ out, int out_ld,
               const int* __restrict__ tok_start, const int* __restrict__ tok_end, const int* __restrict__ tok_pos,
               const float* __restrict__ rope_cos, const float* __restrict__ rope_sin, int window, int n, int heads,
               float scale) {
    pdl_release();
    __shared__ float part[4][65];
    __shared__ float wmax[4];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int i = blockIdx.x / heads, col = (blockIdx.x % heads) * HD;
    if (i >= n) return;
    const int t = q_tok ? q_tok[i] : i;
    int lo = tok_start[t], hi = tok_end[t];
    if (window >= 0) {
        lo = max(lo, t - window);
        hi = min(hi, t + window + 1);
    }
    float qv[64];
    load_head(q + (size_t)i * q_ld + col, qv, rope_cos ? tok_pos[t] : 0, rope_cos, rope_sin);
    float m = NEG_INF, l = 0.f, acc[64];
#pragma unroll
    for (int e = 0; e < 64; ++e) acc[e] = 0.f;
    for (int j = lo + tid; j < hi; j += 128) {
        float kv[64];
        load_head(k + (size_t)j * kv_ld + col, kv, rope_cos ? tok_pos[j] : 0, rope_cos, rope_sin);
        float sc = 0.f;
#pragma unroll
        for (int e = 0; e < 64; ++e) sc += qv[e] * kv[e];
        sc *= scale;
        const float mn = fmaxf(m, sc);
        const float al = expf(m - mn), p = expf(sc - mn);
        l = l * al + p;
        load_head(v + (size_t)j * kv_ld + col, kv, 0, 0, 0);
#pragma unroll
        for (int e = 0; e < 64; ++e) acc[e] = acc[e] * al + p * kv[e];
        m = mn;
    }
    float mx = m;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    mx = fmaxf(fmaxf(wmax[0], wmax[1]), fmaxf(wmax[2], wmax[3]));
    const float f = m == NEG_INF ? 0.f : expf(m - mx);
    const float wl = warp_sum(l * f);
#pragma unroll
    for (int e = 0; e < 64; ++e) {
        const float a = warp_sum(acc[e] * f);
        if (lane == 0) part[warp][e] = a;
    }
    if (lane == 0) part[warp][64] = wl;
    __syncthreads();
    if (tid < 64) {
        const float total = part[0][64] + part[1][64] + part[2][64] + part[3][64];
        const float a = part[0][tid] + part[1][tid] + part[2][tid] + part[3][tid];
        out[(size_t)i * out_ld + col + tid] = f2h(total > 0.f ? a / total : 0.f);
    }
}

// ---------------------------------------------------------------------------------------
// The decision head's last layer reads only the selected positions (position 0 and the
// markers of each row): attention for those queries alone, one block of 4 warps per (query,
// head), exact f32 softmax, no RoPE, no window. The block works as 16 groups of 8 lanes, each
// lane holding 8 of the head's 64 dimensions, so each key or value row is read by its group
// in one 128-byte load and the groups' loads are independent of each other: scores (a group
// per key, its 8 partial sums added in a fixed tree), the chunk's maximum over the block,
// probabilities, then P·V (a group per key again, 8 accumulators a lane). Keys go in chunks
// of SEL_CHUNK with the running maximum rescaling what came before. Every sum runs in a fixed
// order over the query's own row, whatever the rows beside it. Selections past the pass's
// last row (padding) are written as zeros.
#define SEL_CHUNK 512
extern "C" __global__ void __launch_bounds__(128)
attention_sel(const f16* __restrict__ q, int q_ld, const int* __restrict__ q_tok, const f16* __restrict__ k,
              const f16* __restrict__ v, int kv_ld, f16* __restrict__ out, int out_ld,
              const int* __restrict__ tok_start, const int* __restrict__ tok_end,
              const int* __restrict__ row_sel, const int* __restrict__ row_nmark, const int* __restrict__ nrows,
              int n, int heads, float scale) {
    pdl_release();
    __shared__ float ps[SEL_CHUNK];
    __shared__ float red[4];
    __shared__ float part[16][65];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int grp = tid >> 3, c8 = (tid & 7) * 8;
    const int i = blockIdx.x / heads, col = (blockIdx.x % heads) * HD;
    if (i >= n) return;
    const int rows = nrows[0];
    const int used = rows > 0 ? row_sel[rows - 1] + 1 + row_nmark[rows - 1] : 0;
    if (i >= used) {
        if (tid < 64) out[(size_t)i * out_ld + col + tid] = 0;
        return;
    }
    const int t = q_tok[i];
    const int lo = tok_start[t], hi = tok_end[t];
    float qv[8];
    unpack8(*reinterpret_cast<const uint4*>(q + (size_t)i * q_ld + col + c8), qv);
    const f16* kc = k + col + c8;
    const f16* vc = v + col + c8;

    float m = NEG_INF, l = 0.f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
    for (int c0 = lo; c0 < hi; c0 += SEL_CHUNK) {
        const int c1 = min(hi, c0 + SEL_CHUNK);
        float cmax = NEG_INF;
        // The loop runs the same number of times in every lane of a warp (the shuffles need
        // all 32); a group past the chunk's end computes nothing it keeps.
#pragma unroll 4
        for (int jw = c0 + warp * 4; jw < c1; jw += 16) {
            const int j = jw + (lane >> 3);
            const bool live = j < c1;
            float kv[8];
            unpack8(*reinterpret_cast<const uint4*>(kc + (size_t)(live ? j : lo) * kv_ld), kv);
            float sc = 0.f;
#pragma unroll
            for (int e = 0; e < 8; ++e) sc = fmaf(qv[e], kv[e], sc);
            sc += __shfl_xor_sync(0xffffffffu, sc, 1);
            sc += __shfl_xor_sync(0xffffffffu, sc, 2);
            sc += __shfl_xor_sync(0xffffffffu, sc, 4);
            sc *= scale;
            if (live) {
                if ((lane & 7) == 0) ps[j - c0] = sc;
                cmax = fmaxf(cmax, sc);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, o));
        if (lane == 0) red[warp] = cmax;
        __syncthreads();
        const float mn = fmaxf(m, fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3])));
        // The first chunk has no earlier sum to rescale (and no −inf − −inf).
        const float al = m == NEG_INF ? 0.f : expf(m - mn);
        l *= al;
        for (int j = c0 + tid; j < c1; j += 128) {
            const float p = expf(ps[j - c0] - mn);
            ps[j - c0] = p;
            l += p;
        }
        __syncthreads();
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= al;
#pragma unroll 4
        for (int j = c0 + grp; j < c1; j += 16) {
            const float p = ps[j - c0];
            float vv[8];
            unpack8(*reinterpret_cast<const uint4*>(vc + (size_t)j * kv_ld), vv);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] = fmaf(p, vv[e], acc[e]);
        }
        m = mn;
        // ps and red are rewritten by the next chunk.
        __syncthreads();
    }
    const float wl = warp_sum(l);
#pragma unroll
    for (int e = 0; e < 8; ++e) part[grp][c8 + e] = acc[e];
    if (lane == 0) red[warp] = wl;
    __syncthreads();
    if (tid < 64) {
        const float total = red[0] + red[1] + red[2] + red[3];
        float a = 0.f;
#pragma unroll
        for (int g = 0; g < 16; ++g) a += part[g][tid];
        out[(size_t)i * out_ld + col + tid] = f2h(total > 0.f ? a / total : 0.f);
    }
}

// §3.4, the scorer's first linear layer in f32: u = z · W1ᵀ + b1 over `n` selected rows.
// Block (x, y): outputs 8x .. 8x + 7 (one warp each, its weight row held in registers as the
// row kernels hold a row) for rows `per_block` · y onwards. Each output is one lane-ordered sum and a
// fixed shuffle tree, so a row's values do not depend on the rows beside it. These few rows
// are too few for a GEMM library's tiles: cuBLASLt's f32 kernel, picked for 512 rows so that
// every pass uses one algorithm, put its whole work on 8 blocks.
extern "C" __global__ void __launch_bounds__(256)
scorer_hidden(const float* __restrict__ z, const float* __restrict__ w1, const float* __restrict__ b1,
              float* __restrict__ u, int n, int d, int per_block) {
    const int lane = threadIdx.x & 31;
    const int o = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (o >= d) return;
    const int nc = (d + 255) >> 8;
    float w[MAXC * 8];
    load_row_f32(w1 + (size_t)o * d, d, nc, lane, w);
    const float bias = b1[o];
    const int r1 = min(n, (int)(blockIdx.y + 1) * per_block);
    for (int r = blockIdx.y * per_block; r < r1; ++r) {
        float x[MAXC * 8];
        load_row_f32(z + (size_t)r * d, d, nc, lane, x);
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < MAXC * 8; ++i) acc = fmaf(w[i], x[i], acc);
        acc = warp_sum(acc);
        if (lane == 0) u[(size_t)r * d + o] = acc + bias;
    }
}

// §3.4 tail of the scorer: logit = scorer.3 · GELU(u) + b, one warp per selected position.
extern "C" __global__ void scorer_out(const float* __restrict__ u, const float* __restrict__ w3,
                                      const float* __restrict__ b3, float* __restrict__ logits, int n,
                                      int d) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return;
    float s = 0.f;
    for (int i = lane; i < d; i += 32) s += gelu_erf(u[(size_t)row * d + i]) * w3[i];
    s = warp_sum(s);
    if (lane == 0) logits[row] = s + b3[0];
}

// §3.5, first layer of the act head: block (r, y) computes 8 of act_head.0's outputs for row
// r, one warp each, reading the weight rows coalesced. Row r's selected positions start at
// row_sel[r] (position 0), its row_nmark[r] markers follow. The features come from the
// untempered logits as laya_mlx's `act_features` computes them: top1, top1 − top2,
// entropy / ln k, k / 255 with k = max(markers, 2).
extern "C" __global__ void act_hidden(const float* __restrict__ logits, const float* __restrict__ hs,
                                      const int* __restrict__ row_sel, const int* __restrict__ row_nmark,
                                      const int* __restrict__ nrows, const float* __restrict__ w0,
                                      const float* __restrict__ b0, float* __restrict__ hid, int d,
                                      int hidden) {
    __shared__ float feats[4];
    const int r = blockIdx.x;
    if (r >= nrows[0]) return;
    const int s0 = row_sel[r], km = row_nmark[r];
    if (threadIdx.x == 0) {
        const float* z = logits + s0 + 1;
        const float kf = (float)max(km, 2);
        float mx = NEG_INF;
        for (int m = 0; m < km; ++m) mx = fmaxf(mx, z[m]);
        float sum = 0.f;
        for (int m = 0; m < km; ++m) sum += expf(z[m] - mx);
        float ent = 0.f, top1 = 0.f, top2 = 0.f;
        for (int m = 0; m < km; ++m) {
            const float p = expf(z[m] - mx) / sum;
            ent += p * logf(fmaxf(p, 1e-9f));
            if (p > top1) {
                top2 = top1;
                top1 = p;
            } else if (p > top2) {
                top2 = p;
            }
        }
        feats[0] = top1;
        feats[1] = top1 - top2;
        feats[2] = -ent / logf(kf);
        feats[3] = kf / 255.f;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    const int j = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (j >= hidden) return;
    const float* pooled = hs + (size_t)s0 * d;
    const float* wr = w0 + (size_t)j * (d + 4);
    float acc = 0.f;
    for (int i = lane; i < d; i += 32) acc += pooled[i] * wr[i];
    if (lane < 4) acc += feats[lane] * wr[d + lane];
    acc = warp_sum(acc);
    if (lane == 0) hid[(size_t)r * hidden + j] = gelu_erf(acc + b0[j]);
}

// §3.5, second layer: one warp per (row, act logit).
extern "C" __global__ void act_out(const float* __restrict__ hid, const int* __restrict__ nrows,
                                   const float* __restrict__ w2, const float* __restrict__ b2,
                                   float* __restrict__ act, int hidden, int n_act) {
    const int lane = threadIdx.x & 31;
    const int w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int r = w / n_act, a = w % n_act;
    if (r >= nrows[0]) return;
    float s = 0.f;
    for (int j = lane; j < hidden; j += 32) s += hid[(size_t)r * hidden + j] * w2[a * hidden + j];
    s = warp_sum(s);
    if (lane == 0) act[r * n_act + a] = s + b2[a];
}

#ifdef LAYA_WGMMA
// ---------------------------------------------------------------------------------------
// Linear layers of short passes on Hopper (sm_90a only): y[m, o] (op)= x[m, :] · w[o, :]ᵀ,
// f16 in, f32 accumulators. cuBLASLt's kernel for a layer is pinned for batch invariance
// (gemm.rs), and on the ~200 rows of one short request it runs on a few dozen blocks, each
// walking all of k while the rest of the GPU idles. Here a block is one warpgroup owning
// 64 rows × BN outputs, so such a pass spreads over every multiprocessor. Each output is one
// accumulator over k in ascending steps of 16, one wgmma each, which is how cuBLASLt's
// split-free Hopper kernels add up; gemm.rs still runs this kernel for a pass only where it
// gave that layer's cuBLASLt bits on the probe. (mma.sync in the same order does not give
// them: results/GPU.md, 2026-12-05.)
//
// A stage holds a 64-wide k slice of both operands, one 128-byte row per matrix row, in the
// 128-byte swizzle the descriptors name (16-byte chunk c of row r stored at chunk c ^ r % 8),
// so the tensor cores read it without bank conflicts; ST stages are in flight through
// cp.async. Needs k % 64 == 0 and n % BN == 0; rows past m read zeros and are not written.

#define WG_BM 64
#define WG_BK 64

// The shared-memory descriptor of a K-major operand tile at `addr` (1024-byte aligned, or
// that plus the k step's 32-byte offset): leading byte offset unused by swizzled K-major
// layouts (1), stride byte offset 1024 (from one eight-row group to the next), 128-byte
// swizzle.
__device__ __forceinline__ unsigned long long wg_desc(u32 addr) {
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// cp.async writes through the generic proxy, wgmma reads through the async one.
__device__ __forceinline__ void wg_fence_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// One m64nNk16 product into the accumulators `d` (N/2 a thread); `acc` = 0 overwrites them.
__device__ __forceinline__ void wgmma_n32(float* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
        "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wgmma_n64(float* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void wgmma_n128(float* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(acc));
}
template <int BN>
__device__ __forceinline__ void wgmma_step(float* d, unsigned long long a, unsigned long long b, int acc) {
    if constexpr (BN == 32) wgmma_n32(d, a, b, acc);
    if constexpr (BN == 64) wgmma_n64(d, a, b, acc);
    if constexpr (BN == 128) wgmma_n128(d, a, b, acc);
}

// Queues the copies of one stage: rows [m0, m0 + 64) of x and [n0, n0 + BN) of w, halves
// [kk, kk + 64) of each, into the swizzled tiles at shared addresses `sa` and `sb`.
template <int BN>
__device__ __forceinline__ void wg_load(u32 sa, u32 sb, const f16* __restrict__ x, const f16* __restrict__ w,
                                        int m, int k, int m0, int n0, int up, int kk, int tid) {
#pragma unroll
    for (int i = 0; i < WG_BM * 8 / 128; ++i) {
        const int c = tid + i * 128, r = c >> 3, ch = c & 7, row = m0 + r;
        const bool ok = row < m;
        const f16* src = x + (size_t)(ok ? row : 0) * k + kk + ch * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa + r * 128 + ((ch ^ (r & 7)) << 4)),
                     "l"(src), "r"(ok ? 16 : 0));
    }
#pragma unroll
    for (int i = 0; i < BN * 8 / 128; ++i) {
        const int c = tid + i * 128, r = c >> 3, ch = c & 7;
        // GeGLU's blocks (`up` > 0) take BN/2 gate rows from n0 and their up rows from up + n0.
        const int wr = up > 0 && r >= BN / 2 ? up + n0 + r - BN / 2 : n0 + r;
        const f16* src = w + (size_t)wr * k + kk + ch * 8;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, 16;" ::"r"(sb + r * 128 + ((ch ^ (r & 7)) << 4)),
                     "l"(src));
    }
}

// What the epilogue does (gemm.rs `Kind::code`): f16 out; + f16 bias; ReLU(+ f16 bias);
// y += on an f32 stream; y += · + f32 bias, rounded as cuBLASLt's epilogue rounds it (the
// bias added to the product first, then the stream). WG_GEGLU (gemm.rs `Then::GeGlu`): the
// block's first BN/2 outputs are gate columns and the rest the same columns' up half
// (`aux` rows further in w); each output is rounded to f16 as the plain GEMM writes it, then
// g = GELU(gate) ⊙ up is computed as the geglu kernel computes it, so the bits are the
// same as the two steps'.
#define WG_HALF 0
#define WG_HALF_BIAS 1
#define WG_HALF_RELU_BIAS 2
#define WG_RESIDUAL 3
#define WG_RESIDUAL_BIAS 4
#define WG_GEGLU 5
// WG_ROPE (gemm.rs `Then::Rope`): f16 out, and where the block's 64 outputs are a head of q
// or k (before column `aux`), each output rounded to f16 as the plain GEMM writes it, then
// rotated as rope_qk rotates it, at the row's position `pos[row]` in the tables `rc`, `rs`.
#define WG_ROPE 6

// Where the epilogue puts a thread's values: `DirectSink` writes them to y where they land in
// the output (gemm_wg); `StagedSink` into a warpgroup's staging tile in shared memory, which
// `wg_flush_half` / `wg_flush_add` then copy out 16 bytes a thread (gemm_tma). `h2` is a pair
// of f16 outputs (row, col) and (row, col + 1); `add2` adds two f32 values to the stream there.
struct DirectSink {
    void* y;
    int n;
    __device__ __forceinline__ void h2(int row, int col, u32 v) const {
        *reinterpret_cast<u32*>(static_cast<f16*>(y) + (size_t)row * n + col) = v;
    }
    __device__ __forceinline__ void add2(int row, int col, float v0, float v1) const {
        float2* p = reinterpret_cast<float2*>(static_cast<float*>(y) + (size_t)row * n + col);
        float2 o = *p;
        o.x = v0 + o.x;
        o.y = v1 + o.y;
        *p = o;
    }
};

// A staging tile: 64 rows of 256 bytes (128 halves or 64 floats) at a pitch of 272 bytes,
// so that a warp's pairs, in eight rows, fall in distinct banks.
#define WG_STAGE_ROW 272
#define WG_STAGE_BYTES (64 * WG_STAGE_ROW)

struct StagedSink {
    u32 tile;  // shared address of the warpgroup's staging tile
    int m0, c0;  // the output row and column its first element holds
    __device__ __forceinline__ void h2(int row, int col, u32 v) const {
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(tile + (row - m0) * WG_STAGE_ROW + (col - c0) * 2), "r"(v)
                     : "memory");
    }
    // The stream is added when the tile is copied out (wg_flush_add): here the values alone.
    __device__ __forceinline__ void add2(int row, int col, float v0, float v1) const {
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(tile + (row - m0) * WG_STAGE_ROW + (col - c0) * 4),
                     "f"(v0), "f"(v1)
                     : "memory");
    }
};

// Writes a warpgroup's accumulators (rows [m0, m0 + 64) × the block's outputs from n0) as
// `kind` has it. Accumulator i of a thread: row warp·16 + lane/4 (+ 8 for i % 4 ≥ 2), column
// (i / 4)·8 + (lane % 4)·2 (+ 1 for odd i), `warp` counted within the warpgroup.
// The plain kinds write only the block's columns [c_lo, c_hi) (multiples of 8); PLAIN: the
// caller knows `kind` is neither WG_GEGLU nor WG_ROPE.
template <int BN, class Sink, bool PLAIN = false>
__device__ __forceinline__ void wg_epilogue(const float* d, const void* __restrict__ bias, const Sink& out,
                                            int m, int m0, int n0, int kind, int aux,
                                            const int* __restrict__ pos, const float* __restrict__ rc,
                                            const float* __restrict__ rs, int warp, int lane, int c_lo = 0,
                                            int c_hi = BN) {
    const int r0 = m0 + warp * 16 + (lane >> 2);
    if (!PLAIN && kind == WG_GEGLU) {
        // Column c's up value is accumulator group i + BN/16 of the same thread.
#pragma unroll
        for (int i = 0; i < BN / 16; ++i) {
            const int col = n0 + i * 8 + (lane & 3) * 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = r0 + h * 8;
                if (row >= m) continue;
                const int gi = i * 4 + h * 2, ui = (i + BN / 16) * 4 + h * 2;
                const u32 a = pack2(d[gi], d[gi + 1]), b = pack2(d[ui], d[ui + 1]);
                out.h2(row, col, pack2(gelu_erf(lo_f(a)) * lo_f(b), gelu_erf(hi_f(a)) * hi_f(b)));
            }
        }
        return;
    }
    if (!PLAIN && kind == WG_ROPE && n0 < aux) {
        // Each 64 outputs are a head; its dims c and c + 32 are accumulator groups i and i + 4
        // of one thread.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + h * 8;
            if (row >= m) continue;
            const float* c = rc + pos[row] * 32;
            const float* sn = rs + pos[row] * 32;
#pragma unroll
            for (int hd = 0; hd < BN / 64; ++hd)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int dim = i * 8 + (lane & 3) * 2;
                    const int lo = (hd * 8 + i) * 4 + h * 2, hi = lo + 16;
                    const u32 a = pack2(d[lo], d[lo + 1]), b = pack2(d[hi], d[hi + 1]);
                    float a0 = lo_f(a), a1 = hi_f(a), b0 = lo_f(b), b1 = hi_f(b);
                    rope_pair(a0, b0, c[dim], sn[dim]);
                    rope_pair(a1, b1, c[dim + 1], sn[dim + 1]);
                    const int col = n0 + hd * 64 + dim;
                    out.h2(row, col, pack2(a0, a1));
                    out.h2(row, col + 32, pack2(b0, b1));
                }
        }
        return;
    }
    // The value third of a RoPE GEMM is written as it is.
    if (kind == WG_ROPE) kind = WG_HALF;
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
        if (i * 8 < c_lo || i * 8 >= c_hi) continue;
        const int col = n0 + i * 8 + (lane & 3) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = r0 + h * 8;
            if (row >= m) continue;
            float v0 = d[i * 4 + h * 2], v1 = d[i * 4 + h * 2 + 1];
            if (kind <= WG_HALF_RELU_BIAS) {
                if (kind != WG_HALF) {
                    const u32 bb = *reinterpret_cast<const u32*>(static_cast<const f16*>(bias) + col);
                    v0 += lo_f(bb);
                    v1 += hi_f(bb);
                    if (kind == WG_HALF_RELU_BIAS) {
                        v0 = fmaxf(v0, 0.f);
                        v1 = fmaxf(v1, 0.f);
                    }
                }
                out.h2(row, col, pack2(v0, v1));
            } else {
                if (kind == WG_RESIDUAL_BIAS) {
                    const float2 bb = *reinterpret_cast<const float2*>(static_cast<const float*>(bias) + col);
                    v0 += bb.x;
                    v1 += bb.y;
                }
                out.add2(row, col, v0, v1);
            }
        }
    }
}

template <int BN, int ST>
__device__ __forceinline__ void gemm_wg(const f16* __restrict__ x, const f16* __restrict__ w,
                                        const void* __restrict__ bias, void* __restrict__ y, int m, int n, int k,
                                        int kind, int aux, const int* __restrict__ pos,
                                        const float* __restrict__ rc, const float* __restrict__ rs) {
    pdl_release();
    extern __shared__ unsigned char wg_smem[];
    const int up = kind == WG_GEGLU ? aux : 0;
    constexpr u32 A_BYTES = WG_BM * 128, STAGE = (WG_BM + BN) * 128;
    // The swizzle repeats every 1024 bytes and the descriptors assume tiles start on it; the
    // launch asks for 1 KB more than the stages take.
    const u32 base = (smem_addr(wg_smem) + 1023u) & ~1023u;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // n0: the block's first row of w; with GeGLU also its first output column (BN/2 of them).
    const int m0 = blockIdx.y * WG_BM, n0 = blockIdx.x * (up > 0 ? BN / 2 : BN);
    const int tiles = k / WG_BK;

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;

#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (s < tiles) wg_load<BN>(base + s * STAGE, base + s * STAGE + A_BYTES, x, w, m, k, m0, n0, up, s * WG_BK, tid);
        cp_async_commit();
    }
    for (int kt = 0; kt < tiles; ++kt) {
        cp_async_wait<ST - 2>();
        wg_fence_smem();
        // Tile kt has landed for every thread, and the products of tile kt - 1, whose stage
        // the next copy overwrites, are done (waited for below by every warp).
        __syncthreads();
        const int next = kt + ST - 1;
        if (next < tiles) {
            const u32 s = base + (next % ST) * STAGE;
            wg_load<BN>(s, s + A_BYTES, x, w, m, k, m0, n0, up, next * WG_BK, tid);
        }
        cp_async_commit();
        const u32 sa = base + (kt % ST) * STAGE, sb = sa + A_BYTES;
        wg_fence();
#pragma unroll
        for (int j = 0; j < WG_BK / 16; ++j) wgmma_step<BN>(d, wg_desc(sa + j * 32), wg_desc(sb + j * 32), kt | j);
        wg_commit();
        wg_wait_all();
    }
    cp_async_wait<0>();
    // The accumulators are read only after the wait above.
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
    wg_epilogue<BN>(d, bias, DirectSink{y, n}, m, m0, n0, kind, aux, pos, rc, rs, warp, lane);
}

// Stages per width: as many as leave two blocks a multiprocessor (three for the narrower)
// in Hopper's 227 KB of shared memory. wgmma.rs sizes the launches to match.
extern "C" __global__ void __launch_bounds__(128)
gemm_wg_n32(const f16* __restrict__ x, const f16* __restrict__ w, const void* __restrict__ bias,
            void* __restrict__ y, int m, int n, int k, int kind, int aux, const int* __restrict__ pos,
            const float* __restrict__ rc, const float* __restrict__ rs) {
    gemm_wg<32, 6>(x, w, bias, y, m, n, k, kind, aux, pos, rc, rs);
}
extern "C" __global__ void __launch_bounds__(128)
gemm_wg_n64(const f16* __restrict__ x, const f16* __restrict__ w, const void* __restrict__ bias,
            void* __restrict__ y, int m, int n, int k, int kind, int aux, const int* __restrict__ pos,
            const float* __restrict__ rc, const float* __restrict__ rs) {
    gemm_wg<64, 6>(x, w, bias, y, m, n, k, kind, aux, pos, rc, rs);
}

// ---------------------------------------------------------------------------------------
// attention_wg (Hopper): attention_mma's blocks, tiles, masks and online softmax
// (softmax_probs), with both products on wgmma instead of 64 mma.sync and 32 ldmatrix a warp
// for each key tile. Nsight Compute found attention_mma issue- and latency-bound (45% of
// issue slots, 23% occupancy); a warpgroup's wgmma reads Q, K and V straight from shared
// memory and leaves the issue slots to the softmax. S = Q·Kᵀ takes Q and K as K-major
// operands (one 128-byte row a token, as gemm_wg's tiles); P·V takes P from registers (the
// m16n8 accumulator layout is the A fragment's) and V as an MN-major operand: V's rows are
// keys, the k of this product. Each product is waited for before the next step: overlapping
// a tile's S with the last tile's P·V (FlashAttention-3's order) measured slower here
// (results/GPU.md, 2026-12-06). The products add up in attention_mma's order, and on an H100
// they gave its bits exactly (the GPU tests hold that).

// m64n64k16 with A from registers (four per thread, the mma.sync A fragment of the warp's 16
// rows) and an MN-major B (`trans-b` 1).
__device__ __forceinline__ void wgmma_n64_rt(float* d, const u32* a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}

// The descriptor of an MN-major B tile at `addr` (1024-byte aligned): 64 columns (128 bytes,
// one swizzle atom wide) a row, rows of k 128 bytes apart in the same 128-byte swizzle, so
// eight k rows are 1024 bytes. With one atom across, only the k-direction offset is read;
// both offsets are 1024, whichever of the two the hardware takes for it.
__device__ __forceinline__ unsigned long long wg_desc_mn(u32 addr) {
    return (unsigned long long)((addr & 0x3ffffu) >> 4) | ((unsigned long long)(1024 >> 4) << 16) |
           ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

// The compiler must not read accumulators before the wgmma.wait that completes them.
__device__ __forceinline__ void wg_settle(float (&d)[8][4]) {
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[j][e])::"memory");
}

// Queues rows [r0, r0 + 64) ∩ [.., rend) of one head into a swizzled 64 × 64 tile at `dst`
// (rows at or past `rend` become zeros): this thread's chunk of rows sr, sr + 16, sr + 32,
// sr + 48, its source `src` already at its 8 columns.
__device__ __forceinline__ void tile_async_sw(u32 dst, const f16* __restrict__ src, int ld, int r0, int rend,
                                              int sr) {
#pragma unroll
    for (int it = 0; it < 4; ++it) {
        const int row = r0 + sr + it * 16;
        const bool ok = row < rend;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + it * 16 * 128),
                     "l"(src + (size_t)(ok ? row : 0) * ld), "r"(ok ? 16 : 0));
    }
}

// o += P·V over one key tile (V's stage at `sv`), waited for. `o` and `p` are final before the
// fence: the compiler must not sink their arithmetic past it, which would serialise the
// products.
__device__ __forceinline__ void wg_pv(float (&o)[8][4], u32 (&p)[4][4], u32 sv) {
    wg_settle(o);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(p[kk][e])::"memory");
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_n64_rt(&o[0][0], p[kk], wg_desc_mn(sv + kk * 16 * 128));
    wg_commit();
    wg_wait_all();
    wg_settle(o);
}

extern "C" __global__ void __launch_bounds__(128, LAYA_ATT_BLOCKS)
attention_wg(const f16* __restrict__ q, const f16* __restrict__ k, const f16* __restrict__ v, int ld,
             f16* __restrict__ out, int out_ld, const int* __restrict__ tiles, const int* __restrict__ tok_start,
             const int* __restrict__ tok_end, int window, float scale) {
    pdl_release();
    extern __shared__ unsigned char att_smem[];
    // Q, then two stages of K and V, 8 KB each, on the swizzle's 1024-byte period (the launch
    // asks for 1 KB more than the five tiles).
    constexpr u32 TILE = BK * 128, STAGE = 2 * TILE;
    const u32 sq = (smem_addr(att_smem) + 1023u) & ~1023u, sk0 = sq + TILE, sv0 = sk0 + TILE;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = tiles[blockIdx.x];
    if (q0 < 0) return;
    const int col = blockIdx.y * HD;
    const int rs = tok_start[q0], re = tok_end[q0];
    const int qend = min(q0 + BQ, re);
    int khi, kt0, ntiles;
    tile_keys(q0, qend, rs, re, window, khi, kt0, ntiles);

    // This thread's chunk of every tile row it copies: rows tid / 8 + 16·i, 16-byte chunk
    // tid % 8, stored at chunk (tid % 8) ^ (row % 8).
    const int sr = tid >> 3, ch = tid & 7;
    const u32 off = sr * 128 + ((ch ^ (sr & 7)) << 4);
    const f16* kc = k + col + ch * 8;
    const f16* vc = v + col + ch * 8;
    tile_async_sw(sq + off, q + col + ch * 8, ld, q0, qend, sr);
    if (ntiles > 0) {
        tile_async_sw(sk0 + off, kc, ld, kt0, khi, sr);
        tile_async_sw(sv0 + off, vc, ld, kt0, khi, sr);
    }
    cp_async_commit();

    const int qi0 = q0 + warp * 16 + (lane >> 2), qi1 = qi0 + 8;
    int lo0, hi0, lo1, hi1;
    query_keys(qi0, qend, rs, re, window, lo0, hi0);
    query_keys(qi1, qend, rs, re, window, lo1, hi1);
    // The keys all 16 queries of this warp see (as in attention_mma).
    const int wq0 = q0 + warp * 16;
    int flo = 1, fhi = 0;
    if (wq0 + 16 <= qend) {
        flo = window >= 0 ? max(rs, wq0 + 15 - window) : rs;
        fhi = window >= 0 ? min(re, wq0 + window + 1) : re;
    }

    float o[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
    float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
    const float sl2 = scale * 1.4426950408889634f;

    for (int m = 0; m < ntiles; ++m) {
        const int kt = kt0 + m * BK;
        const u32 sk = sk0 + (m & 1) * STAGE;
        // Tile m has landed for every thread, and every warp has waited for the products
        // that last read the stage the next copy fills (tile m - 1's).
        cp_async_wait<0>();
        wg_fence_smem();
        __syncthreads();
        if (m + 1 < ntiles) {
            const u32 nx = ((m + 1) & 1) * STAGE;
            tile_async_sw(sk0 + nx + off, kc, ld, kt + BK, khi, sr);
            tile_async_sw(sv0 + nx + off, vc, ld, kt + BK, khi, sr);
        }
        cp_async_commit();

        float s[8][4];
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_n64(&s[0][0], wg_desc(sq + kk * 32), wg_desc(sk + kk * 32), kk);
        wg_commit();
        wg_wait_all();
        wg_settle(s);

        u32 pa[4][4];
        float al0, al1;
        softmax_probs(s, m0, m1, l0, l1, al0, al1, kt >= flo && kt + BK <= fhi, kt, lo0, hi0, lo1, hi1, sl2, lane);
        rescale_rows(o, al0, al1);
        pack_p(s, pa);
        wg_pv(o, pa, sv0 + (m & 1) * STAGE);
    }
    // A tile always has a key tile (ntiles ≥ 1); should it not, its query copy still lands
    // before the block ends.
    cp_async_wait<0>();
    attention_store(o, l0, l1, out, out_ld, col, qi0, qi1, qend, lane);
}

// ---------------------------------------------------------------------------------------
// gemm_tma: the same sums as gemm_wg (one accumulator an output, wgmma k16 steps in
// ascending k, the same epilogue), fed by the Tensor Memory Accelerator. gemm_wg's own
// threads copied each stage and met at a block-wide barrier every k step, with the step's
// products drained before the next copy: Nsight Compute found it waiting on latency, not
// bandwidth. Here one producer warp asks TMA for whole tiles, already in the 128-byte
// swizzle, against an mbarrier per stage ("full": the bytes have landed), and each consumer
// warpgroup releases a stage ("empty") once its products of that stage are done, one step
// behind, so a step's products overlap the next step's wait. WGS consumer warpgroups share
// the weight tile: a block is 64·WGS rows × BN outputs. Launched dependent on the kernel
// before it (wgmma.rs), the producer fetches the first stages' weights before pdl_wait.
// Each warpgroup's outputs leave through a staging tile of its own in shared memory, after
// the stages and barriers, in whole rows (wg_flush_half, wg_flush_add).

// A tensor map as cuTensorMapEncodeTiled writes it, passed by value.
struct __align__(64) TmaMap {
    unsigned long long v[16];
};

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Arrives once and expects `bytes` more of asynchronous copies to land on `bar`.
__device__ __forceinline__ void mbar_expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Waits for the phase of `bar` whose parity is `parity` to complete.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
// Copies the box of `map` at (column c0, row c1) into shared memory at `dst`, counted on `bar`.
__device__ __forceinline__ void tma_load(u32 dst, const TmaMap* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}
// Warpgroup `wg`'s own barrier (0 is __syncthreads'): its 128 threads alone.
__device__ __forceinline__ void wg_bar(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(1 + wg) : "memory"); }

// 16 bytes of shared memory at `addr`.
__device__ __forceinline__ uint4 ld_shared16(u32 addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// Copies a warpgroup's staging tile to y: CH 16-byte chunks a row (8·CH halves from column
// c0), the rows from m0 that are below m, 16 bytes a thread, so that a warp writes whole rows.
template <int CH>
__device__ __forceinline__ void wg_flush_half(u32 tile, void* __restrict__ y, int m, int n, int m0, int c0, int t) {
#pragma unroll
    for (int i = 0; i < 64 * CH / 128; ++i) {
        const int c = t + i * 128, r = c / CH, ch = c % CH, row = m0 + r;
        if (row >= m) continue;
        *reinterpret_cast<uint4*>(static_cast<f16*>(y) + (size_t)row * n + c0 + ch * 8) =
            ld_shared16(tile + r * WG_STAGE_ROW + ch * 16);
    }
}

// Adds a warpgroup's staging tile (64 floats a row) to the f32 stream y from column c0, as
// DirectSink::add2 adds each value: y = v + y, one rounding. The stream's loads are issued
// BATCH at a time before their adds (more would spill the 192-row form's registers).
__device__ __forceinline__ void wg_flush_add(u32 tile, void* __restrict__ y, int m, int n, int m0, int c0, int t) {
    constexpr int CH = 16, STEPS = 64 * CH / 128, BATCH = 4;
#pragma unroll
    for (int b = 0; b < STEPS; b += BATCH) {
        float4 o[BATCH];
#pragma unroll
        for (int j = 0; j < BATCH; ++j) {
            const int c = t + (b + j) * 128, r = c / CH, ch = c % CH, row = m0 + r;
            if (row < m)
                o[j] = *reinterpret_cast<const float4*>(static_cast<const float*>(y) + (size_t)row * n + c0 + ch * 4);
        }
#pragma unroll
        for (int j = 0; j < BATCH; ++j) {
            const int c = t + (b + j) * 128, r = c / CH, ch = c % CH, row = m0 + r;
            if (row >= m) continue;
            const uint4 v = ld_shared16(tile + r * WG_STAGE_ROW + ch * 16);
            o[j].x = __uint_as_float(v.x) + o[j].x;
            o[j].y = __uint_as_float(v.y) + o[j].y;
            o[j].z = __uint_as_float(v.z) + o[j].z;
            o[j].w = __uint_as_float(v.w) + o[j].w;
            *reinterpret_cast<float4*>(static_cast<float*>(y) + (size_t)row * n + c0 + ch * 4) = o[j];
        }
    }
}

template <int N>
__device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// `ta`: x, boxes of 64 halves × 64·WGS rows; `tb`: w, boxes of 64 halves × BN rows (BN/2 with
// GeGLU, whose gate rows start at n0 and up rows at aux + n0). Persistent: the grid is as
// many blocks as the GPU holds at once, and a block computes every gridDim.x-th output tile
// from blockIdx.x (numbered row-tile-major, n tiles a row tile), its producer fetching the
// next tile's first stages while the consumers write the last one's outputs.
template <int BN, int WGS, int ST>
__device__ __forceinline__ void gemm_tma(const TmaMap& ta, const TmaMap& tb, const void* __restrict__ bias,
                                         void* __restrict__ y, int m, int n, int k, int kind, int aux,
                                         const int* __restrict__ pos, const float* __restrict__ rc,
                                         const float* __restrict__ rs) {
    pdl_release();
    extern __shared__ unsigned char wg_smem[];
    constexpr int BM = WG_BM * WGS;
    constexpr u32 A_BYTES = BM * 128, STAGE = (BM + BN) * 128;
    // Tiles start on the swizzle's 1024-byte period (the launch asks for 1 KB more); the
    // barriers follow the stages: full[ST], then empty[ST].
    const u32 base = (smem_addr(wg_smem) + 1023u) & ~1023u;
    const u32 full = base + ST * STAGE, empty = full + ST * 8;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool geglu = kind == WG_GEGLU;
    // Outputs a tile covers (with GeGLU, BN/2 output columns from BN weight rows).
    const int tn = geglu ? BN / 2 : BN;
    const int n_tiles = n / tn, total = n_tiles * ((m + BM - 1) / BM);
    const int first = blockIdx.x, stride = gridDim.x;
    const int tiles = k / WG_BK;

    if (tid == 0) {
#pragma unroll
        for (int s = 0; s < ST; ++s) {
            mbar_init(full + s * 8, 1);
            mbar_init(empty + s * 8, 4 * WGS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == 4 * WGS) {
        if (lane != 0) return;
        const auto load_w = [&](int s, int kt, int n0) {
            const u32 sb = base + s * STAGE + A_BYTES, bar = full + s * 8;
            if (geglu) {
                tma_load(sb, &tb, bar, kt * WG_BK, n0);
                tma_load(sb + BN / 2 * 128, &tb, bar, kt * WG_BK, aux + n0);
            } else {
                tma_load(sb, &tb, bar, kt * WG_BK, n0);
            }
        };
        const auto load_x = [&](int s, int kt, int m0) {
            tma_load(base + s * STAGE, &ta, full + s * 8, kt * WG_BK, m0);
        };
        // The weights never depend on the kernel before; the activations do: the first
        // tile's first stages ask for their weights before waiting for it.
        const int pre = tiles < ST ? tiles : ST;
        if (first < total) {
            const int m0 = first / n_tiles * BM, n0 = first % n_tiles * tn;
            for (int kt = 0; kt < pre; ++kt) {
                mbar_expect(full + kt * 8, STAGE);
                load_w(kt, kt, n0);
            }
            pdl_wait();
            for (int kt = 0; kt < pre; ++kt) load_x(kt, kt, m0);
        }
        // g: the k step counted over every tile of this block, which picks the stage.
        int g = 0;
        for (int t = first; t < total; t += stride) {
            const int m0 = t / n_tiles * BM, n0 = t % n_tiles * tn;
            for (int kt = 0; kt < tiles; ++kt, ++g) {
                if (g < pre) continue;
                const int s = g % ST;
                mbar_wait(empty + s * 8, ((g / ST) - 1) & 1);
                mbar_expect(full + s * 8, STAGE);
                load_w(s, kt, n0);
                load_x(s, kt, m0);
            }
        }
        return;
    }

    const int wg = warp >> 2;
    // This warpgroup's staging tile, after the barriers.
    const u32 stage = ((empty + ST * 8 + 15u) & ~15u) + wg * WG_STAGE_BYTES;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
    int g = 0;
    for (int t = first; t < total; t += stride) {
        const int m0 = t / n_tiles * BM, n0 = t % n_tiles * tn;
        for (int kt = 0; kt < tiles; ++kt, ++g) {
            const int s = g % ST;
            mbar_wait(full + s * 8, (g / ST) & 1);
            const u32 sa = base + s * STAGE + wg * WG_BM * 128, sb = base + s * STAGE + A_BYTES;
            wg_fence();
#pragma unroll
            for (int j = 0; j < WG_BK / 16; ++j) wgmma_step<BN>(d, wg_desc(sa + j * 32), wg_desc(sb + j * 32), kt | j);
            wg_commit();
            // The step before this one is done: its stage may be refilled.
            wg_wait<1>();
            if (kt > 0 && lane == 0) mbar_arrive(empty + ((g - 1) % ST) * 8);
        }
        wg_wait<0>();
        // And this tile's last stage.
        if (lane == 0) mbar_arrive(empty + ((g - 1) % ST) * 8);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");
        // The residual kinds read y, which the kernel before may have written.
        pdl_wait();
        // The outputs go through the warpgroup's staging tile, so that y is written (and the
        // stream read) in whole rows: written where they land, a warp's 4-byte pairs touched
        // eight rows an instruction, and without its epilogue the kernel took 28-58% less
        // time. A tile holds 256 bytes a row: the f32 stream's 128 columns go in two halves.
        const int wm0 = m0 + wg * WG_BM, wt = tid & 127;
        if (kind == WG_RESIDUAL || kind == WG_RESIDUAL_BIAS) {
#pragma unroll
            for (int half = 0; half < BN / 64; ++half) {
                const int c0 = n0 + half * 64;
                wg_epilogue<BN, StagedSink, true>(d, bias, StagedSink{stage, wm0, c0}, m, wm0, n0, kind, aux, pos, rc,
                                                  rs, warp & 3, lane, half * 64, half * 64 + 64);
                wg_bar(wg);
                wg_flush_add(stage, y, m, n, wm0, c0, wt);
                wg_bar(wg);
            }
        } else {
            wg_epilogue<BN>(d, bias, StagedSink{stage, wm0, n0}, m, wm0, n0, kind, aux, pos, rc, rs, warp & 3, lane);
            wg_bar(wg);
            if (geglu)
                wg_flush_half<BN / 16>(stage, y, m, n, wm0, n0, wt);
            else
                wg_flush_half<BN / 8>(stage, y, m, n, wm0, n0, wt);
            wg_bar(wg);
        }
    }
}

// Forms (wgmma.rs's `Tile`), 128 outputs in 4 stages, one block a multiprocessor: 128 rows
// (two consumer warpgroups) and 192 (three). Nsight Compute found the 128-row form bound by
// the L2 cache's bandwidth (every block reads its weight tile once per row tile); 192 rows
// read each weight tile a third fewer times. 256 rows (four warpgroups) would leave 96
// registers a thread (17 warps over four schedulers) and spill. Measured and dropped: 3
// stages and two blocks a multiprocessor (registers capped at 96, spilling), 6 stages, and
// 128 × 256 outputs.
extern "C" __global__ void __launch_bounds__(288, 1)
gemm_tma_m128_n128(const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb,
                   const void* __restrict__ bias, void* __restrict__ y, int m, int n, int k, int kind, int aux,
                   const int* __restrict__ pos, const float* __restrict__ rc, const float* __restrict__ rs) {
    gemm_tma<128, 2, 4>(ta, tb, bias, y, m, n, k, kind, aux, pos, rc, rs);
}
extern "C" __global__ void __launch_bounds__(416, 1)
gemm_tma_m192_n128(const __grid_constant__ TmaMap ta, const __grid_constant__ TmaMap tb,
                   const void* __restrict__ bias, void* __restrict__ y, int m, int n, int k, int kind, int aux,
                   const int* __restrict__ pos, const float* __restrict__ rc, const float* __restrict__ rs) {
    gemm_tma<128, 3, 4>(ta, tb, bias, y, m, n, k, kind, aux, pos, rc, rs);
}
#endif  // LAYA_WGMMA

// Holds the stream for `ns` nanoseconds, so that work queued behind it starts back to back
// (the profiler's way to time steps without the host's launch gaps).
extern "C" __global__ void spin(long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while ((long long)(now - start) < ns);
}
