/* CPU emulation of the PTX warp-matrix instructions of src/cuda/mma.cuh (mma.sync m16n8k16
 * with bf16 operands and fp32 accumulation, ldmatrix .x4 and .x4.trans), with the register
 * layouts the PTX ISA documents, for the fiber emulator of sk_cuda_emu.h. Each call is
 * warp-collective: every lane posts its operands (registers, or its row address) to a
 * scratch slot, a warp barrier, then each lane computes its own result from the others'
 * slots, and a second barrier before the slots are reused. So a call that only part of a
 * warp reaches deadlocks (the emulator aborts), a lane layout mistake gives wrong numbers,
 * and ldmatrix reads shared memory when the whole warp has arrived, as the hardware does:
 * rows another thread has not yet written (no __syncthreads) read as NaN. A row address
 * must be 16-byte aligned. Products of bf16 values are exact in fp32; each result element
 * adds its 16 products in order to the accumulator. */
#ifndef SK_MMA_EMU_H
#define SK_MMA_EMU_H
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

void emu_syncwarp(void);
unsigned emu_tid(void);
uint64_t *emu_lane_scratch(void);     /* 8 words per thread of the block */
/* cp.async (emu.cpp): the copy lands at the wait that covers its group; NaN until then */
void emu_cp_async(void *dst, const void *src, int bytes);
void emu_cp_commit(void);
void emu_cp_wait(int n);
/* shared-memory tile reads and writes, checked for a missing barrier (emu.cpp) */
void emu_smem_read(const void *p, int bytes);
void emu_smem_write(void *p, int bytes, const char *what);
static inline void emu_sts32(void *p, uint32_t v) {
    emu_smem_write(p, 4, "a shared-memory store");
    memcpy(p, &v, 4);
}

static inline float emu_bf16_lo(uint32_t w) { uint32_t u = w << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float emu_bf16_hi(uint32_t w) { uint32_t u = w & 0xffff0000u; float f; memcpy(&f, &u, 4); return f; }

static inline void emu_mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    uint64_t *s = emu_lane_scratch();
    const unsigned t = emu_tid(), lane = t & 31u, w0 = t - lane;
    uint64_t *me = s + 8 * t;
    for (int i = 0; i < 4; i++) me[i] = a[i];
    me[4] = b0; me[5] = b1;
    emu_syncwarp();
    float A[16][16], B[16][8];
    for (unsigned l = 0; l < 32; l++) {
        const uint64_t *o = s + 8 * (w0 + l);
        const int g = (int)(l >> 2), q = (int)(l & 3);
        const uint32_t r[6] = {(uint32_t)o[0], (uint32_t)o[1], (uint32_t)o[2], (uint32_t)o[3], (uint32_t)o[4], (uint32_t)o[5]};
        A[g][2 * q] = emu_bf16_lo(r[0]);     A[g][2 * q + 1] = emu_bf16_hi(r[0]);
        A[g + 8][2 * q] = emu_bf16_lo(r[1]); A[g + 8][2 * q + 1] = emu_bf16_hi(r[1]);
        A[g][2 * q + 8] = emu_bf16_lo(r[2]); A[g][2 * q + 9] = emu_bf16_hi(r[2]);
        A[g + 8][2 * q + 8] = emu_bf16_lo(r[3]); A[g + 8][2 * q + 9] = emu_bf16_hi(r[3]);
        B[2 * q][g] = emu_bf16_lo(r[4]);     B[2 * q + 1][g] = emu_bf16_hi(r[4]);
        B[2 * q + 8][g] = emu_bf16_lo(r[5]); B[2 * q + 9][g] = emu_bf16_hi(r[5]);
    }
    const int g = (int)(lane >> 2), q = (int)(lane & 3);
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * q + (e & 1);
        float acc = d[e];
        for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
        d[e] = acc;
    }
    emu_syncwarp();
}

static inline void emu_ldsm(uint32_t (&r)[4], const void *p, bool trans) {
    if ((uintptr_t)p % 16 != 0) {
        fprintf(stderr, "emu: ldmatrix row address %p not 16-byte aligned\n", p);
        abort();
    }
    uint64_t *s = emu_lane_scratch();
    const unsigned t = emu_tid(), lane = t & 31u, w0 = t - lane;
    emu_smem_read(p, 16);
    s[8 * t] = (uint64_t)(uintptr_t)p;
    emu_syncwarp();
    const unsigned g = lane >> 2, q = lane & 3;
    for (unsigned i = 0; i < 4; i++) {
        uint16_t lo, hi;
        if (!trans) {                 /* row g, columns 2q, 2q + 1 of matrix i */
            const uint16_t *row = (const uint16_t *)(uintptr_t)s[8 * (w0 + 8 * i + g)];
            lo = row[2 * q]; hi = row[2 * q + 1];
        } else {                      /* rows 2q, 2q + 1, column g */
            lo = ((const uint16_t *)(uintptr_t)s[8 * (w0 + 8 * i + 2 * q)])[g];
            hi = ((const uint16_t *)(uintptr_t)s[8 * (w0 + 8 * i + 2 * q + 1)])[g];
        }
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    emu_syncwarp();
}
/* Ordering between blocks: the blocks of a grid run one after the other, so a flag a block
 * waits for is set already or never will be (a block waiting for one that runs after it:
 * a deadlock on a GPU too, unless both are resident) */
static inline void emu_flag_wait_ge(const int *p, int v) {
    if (*p < v) {
        fprintf(stderr, "emu: a block waits for a flag (%d, wants %d) that only a later block can set\n", *p, v);
        abort();
    }
}
static inline void emu_flag_release(int *p, int v) { *p = v; }
static inline void emu_red_add(float *p, float x) { *p += x; }
static inline void emu_red_add2(float *p, float x, float y) {
    if ((uintptr_t)p % 8 != 0) {
        fprintf(stderr, "emu: a paired reduction at %p, not 8-byte aligned\n", (void *)p);
        abort();
    }
    p[0] += x;
    p[1] += y;
}
static inline void emu_ldsm_x4(uint32_t (&r)[4], const void *p) { emu_ldsm(r, p, false); }
static inline void emu_ldsm_x4_trans(uint32_t (&r)[4], const void *p) { emu_ldsm(r, p, true); }
#endif
