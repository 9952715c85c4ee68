/* logspam: sends log lines to logfilt's socket at a steady rate (the suspect that drives its CPU).
 *
 *   logspam -s SOCKET -p PIDFILE [-r LINES_PER_S]     logspam --version
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef GIT_HASH
#define GIT_HASH "unknown"
#endif

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv)
{
	const char *sock = NULL, *pidfile = NULL;
	long rate = 1000;
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("logspam %s\n", GIT_HASH);
		return 0;
	}
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-s") == 0)
			sock = argv[i + 1];
		else if (strcmp(argv[i], "-p") == 0)
			pidfile = argv[i + 1];
		else if (strcmp(argv[i], "-r") == 0)
			rate = atol(argv[i + 1]);
	}
	if (!sock || rate < 1 || rate > 1000000) {
		fprintf(stderr, "usage: logspam -s SOCKET -p PIDFILE [-r LINES_PER_S]\n");
		return 2;
	}
	int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (pidfile) {
		FILE *f = fopen(pidfile, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	/* batches of 10 lines every 10/rate s, on absolute deadlines: the rate stays what was asked
	 * however long a send takes (a load that slowed down with its receiver would hide a change
	 * of the receiver's cost behind a change of its input) */
	long gap_ns = (long)(10.0e9 / (double)rate);
	struct timespec next;
	clock_gettime(CLOCK_MONOTONIC, &next);
	char line[512];
	for (unsigned long seq = 0; !stop;) {
		for (int k = 0; k < 10; k++, seq++) {
			int n = snprintf(line, sizeof line,
					 "<30>Nov 23 12:00:00 daemon.info netifd[%lu]: Interface 'wan' "
					 "is now up, dhcp lease renewed for 3600 s, dns 192.0.2.%lu, "
					 "gateway 192.0.2.1, mtu 1500, carrier ok, tx queue 1000",
					 seq, seq % 250);
			if (sendto(fd, line, (size_t)n, 0, (struct sockaddr *)&addr, sizeof addr) < 0
			    && errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN)
				break;
		}
		next.tv_nsec += gap_ns;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_nsec -= 1000000000L;
			next.tv_sec++;
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > next.tv_sec + 1) /* fell behind by seconds (the receiver stalled): */
			next = now;                /* resume the rate, never burst to catch up */
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
	}
	return 0;
}
