/* CPU emulation of the bf16 type and the warp matrix API (nvcuda::wmma, <mma.h>) that the
 * tensor-core attention uses (src/cuda/attention_tc.cu), for the fiber emulator of
 * sk_cuda_emu.h. What it checks, beyond the arithmetic:
 *   - every load, store and mma is warp-collective: it is a warp barrier, so a call that
 *     only some lanes of a warp reach deadlocks (and the emulator aborts with a message);
 *   - a fragment is opaque: each lane owns 8 of the 256 elements of a 16x16 accumulator
 *     (here element e belongs to lane e % 32; the hardware's mapping is another one) and
 *     store_matrix_sync writes only the calling lane's elements, so code that reads a
 *     stored tile before a barrier (__syncwarp / __syncthreads) reads other lanes' stale
 *     bytes (NaN) and fails its test;
 *   - pointers are 256-bit aligned and ldm a multiple of 16 bytes, as the API requires.
 * Products of bf16 values are exact in fp32; each output element sums its 16 products in
 * order into the fp32 accumulator. */
#ifndef SK_WMMA_EMU_H
#define SK_WMMA_EMU_H
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct __nv_bfloat16 { uint16_t x; };
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) r.x = (uint16_t)((u >> 16) | 0x40u);        /* NaN stays NaN */
    else r.x = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

void emu_syncwarp(void);
unsigned emu_tid(void);

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "emu: only m16n16k16");
    enum { num_elements = 256 };
    float x[256];                 /* row-major 16 x 16 */
};

static inline void emu_check(const void *p, unsigned ldm, unsigned elem) {
    if ((uintptr_t)p % 32 != 0 || (ldm * elem) % 16 != 0) {
        fprintf(stderr, "emu: wmma pointer %p not 256-bit aligned or ldm %u not a multiple of 16 bytes\n", p, ldm);
        abort();
    }
}
static inline bool emu_owns(int e) { return (unsigned)(e & 31) == (emu_tid() & 31u); }

template <typename Use, typename L>
static inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f, const __nv_bfloat16 *p,
                                    unsigned ldm) {
    emu_check(p, ldm, 2);
    emu_syncwarp();
    const bool col = std::is_same<L, col_major>::value;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) f.x[r * 16 + c] = __bfloat162float(p[col ? c * ldm + r : r * ldm + c]);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                                    layout_t l) {
    emu_check(p, ldm, 4);
    emu_syncwarp();
    for (int e = 0; e < 256; e++) f.x[e] = l == mem_col_major ? p[(e % 16) * ldm + e / 16] : p[(e / 16) * ldm + e % 16];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                                     layout_t l) {
    emu_check(p, ldm, 4);
    emu_syncwarp();
    for (int e = 0; e < 256; e++)
        if (emu_owns(e)) (l == mem_col_major ? p[(e % 16) * ldm + e / 16] : p[(e / 16) * ldm + e % 16]) = f.x[e];
}
static inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float v) {
    for (int e = 0; e < 256; e++) f.x[e] = v;
}
template <typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    emu_syncwarp();
    for (int e = 0; e < 256; e++) {
        if (!emu_owns(e)) { d.x[e] = NAN; continue; }     /* another lane's element */
        const int r = e / 16, col = e % 16;
        float s = c.x[e];
        for (int k = 0; k < 16; k++) s += a.x[r * 16 + k] * b.x[k * 16 + col];
        d.x[e] = s;
    }
}
} // namespace wmma
} // namespace nvcuda
#endif
