/* Calibrated CPU work: costs are stated in microseconds and burnt as loop iterations.
 * Inlined on purpose so the samples land in the caller's frame (the mechanism function). */
#ifndef STA_WORK_H
#define STA_WORK_H
#include <stdint.h>

extern uint64_t work_per_us; /* iterations per microsecond, from work_calibrate() or config */

static inline __attribute__((always_inline)) void work_iters(uint64_t n)
{
	uint64_t x = n | 1;
	for (uint64_t i = 0; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		__asm__ volatile("" : "+r"(x)); /* keeps the loop and its dependency chain */
	}
}

static inline __attribute__((always_inline)) void work_us(double us)
{
	work_iters((uint64_t)(us * (double)work_per_us));
}

uint64_t work_calibrate(void);

#endif
