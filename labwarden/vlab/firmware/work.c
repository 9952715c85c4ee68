/* Work-loop calibration: iterations per microsecond of *CPU* time (not wall), median of runs,
 * so a busy neighbour does not skew it much. */
#include <stdlib.h>
#include <time.h>
#include "work.h"

uint64_t work_per_us = 1000;

static double cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

uint64_t work_calibrate(void)
{
	enum { RUNS = 9 };
	const uint64_t n = 20000000;
	double rate[RUNS];

	work_iters(n / 2); /* warm up the core / frequency */
	for (int i = 0; i < RUNS; i++) {
		double t0 = cpu_us();
		work_iters(n);
		double dt = cpu_us() - t0;
		rate[i] = dt > 0 ? n / dt : 0;
	}
	qsort(rate, RUNS, sizeof rate[0], cmp_double);
	uint64_t r = (uint64_t)(rate[RUNS / 2] + 0.5);
	return r ? r : 1;
}
