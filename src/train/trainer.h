/* Internal to the trainer (src/train/train.c) and its tests. */
#ifndef SK_TRAINER_INTERNAL_H
#define SK_TRAINER_INTERNAL_H
#include <stdint.h>

/* Stateless 64-bit seed for micro-step `micro` of step `step` of a run seeded `seed`. */
uint64_t sk_dropout_seed(uint64_t seed, long step, int micro);
#endif
