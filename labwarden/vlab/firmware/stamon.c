/* stamon: the monitor (prplMesh-like). Every interval_ms polls each enabled VAP once with the
 * stats RPC; reconnects if stad restarts.  stamon --config DIR --socket PATH | --version */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "sta.h"
#include "version.h"

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = t / 1000000000ULL, .tv_nsec = t % 1000000000ULL };
	while (!stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *sock = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--version")) {
			printf("stamon %s\n", fw_git_tag + sizeof "labwarden-fw-git:" - 1);
			return 0;
		} else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
			dir = argv[++i];
		} else if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
			sock = argv[++i];
		} else {
			fprintf(stderr, "usage: stamon --config DIR --socket PATH\n");
			return 2;
		}
	}
	if (!dir || !sock) {
		fprintf(stderr, "usage: stamon --config DIR --socket PATH\n");
		return 2;
	}

	const char *method = "getStationStats";
	long interval_ms = 1000;
	struct uci_pkg p;
	if (!uci_load(dir, "stamon", &p)) {
		const char *iv = uci_get(&p, "main", "interval_ms");
		if (iv && atol(iv) > 0)
			interval_ms = atol(iv);
	}

	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	struct sbuf reply;
	char vaps[256] = "", req[96];
	int fd = -1;
	uint64_t next = mono_ns();
	sbuf_init(&reply);
	while (!stop) {
		if (fd < 0) {
			if ((fd = rpc_connect(sock)) < 0 || rpc_call(fd, "vaps", &reply)) {
				if (fd >= 0)
					close(fd);
				fd = -1;
				usleep(200000);
				continue;
			}
			snprintf(vaps, sizeof vaps, "%.*s", (int)reply.len, reply.p ? reply.p : "");
			next = mono_ns();
		}
		char list[256], *save = NULL;
		snprintf(list, sizeof list, "%s", vaps);
		for (char *v = strtok_r(list, " \n", &save); v && fd >= 0; v = strtok_r(NULL, " \n", &save)) {
			snprintf(req, sizeof req, "%s %s", method, v);
			int rc = rpc_call(fd, req, &reply);
			if (rc < 0) { /* stad went away: reconnect */
				close(fd);
				fd = -1;
			} else if (rc > 0) {
				fprintf(stderr, "stamon: %s: %.*s\n", req, (int)reply.len, reply.p);
			}
		}
		/* Fixed cadence; after an overrun or a SIGSTOP, resume without a catch-up burst. */
		next += (uint64_t)interval_ms * 1000000ULL;
		uint64_t now = mono_ns();
		if (next < now)
			next = now + (uint64_t)interval_ms * 1000000ULL;
		sleep_until(next);
	}
	if (fd >= 0)
		close(fd);
	uci_free(&p);
	sbuf_free(&reply);
	return 0;
}
