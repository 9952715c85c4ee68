/* logfilt: a rule-based log filter (the second firmware of labwarden's test suite; not WiFi).
 *
 * Receives log lines as datagrams on a UNIX socket, matches every line against every rule
 * (case-insensitive substring, the naive way) and counts what each rule caught. The matcher,
 * match_rule(), is static and never exported: a stripped image has no symbol for it; only the
 * build's debug file does. Its CPU is driven by whoever sends the lines (logspam).
 *
 *   logfilt -s SOCKET -p PIDFILE [-n RULES]     logfilt --version
 */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef GIT_HASH
#define GIT_HASH "unknown"
#endif

struct rule {
	char needle[48];
	unsigned long hits;
};

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

/* The hotspot: a case-insensitive substring search, one tolower() per byte compared. */
static __attribute__((noinline)) int match_rule(const struct rule *r, const char *line, size_t len)
{
	size_t n = strlen(r->needle);
	for (size_t i = 0; i + n <= len; i++) {
		size_t j = 0;
		while (j < n && tolower((unsigned char)line[i + j]) == tolower((unsigned char)r->needle[j]))
			j++;
		if (j == n)
			return 1;
	}
	return 0;
}

/* One line through every rule: what a uprobe counts (one hit per line). */
static __attribute__((noinline)) int filter_line(struct rule *rules, int nrules, const char *line,
						size_t len)
{
	int caught = 0;
	for (int i = 0; i < nrules; i++)
		if (match_rule(&rules[i], line, len)) {
			rules[i].hits++;
			caught++;
		}
	return caught;
}

int main(int argc, char **argv)
{
	const char *sock = NULL, *pidfile = NULL;
	int nrules = 1000;
	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("logfilt %s\n", GIT_HASH);
		return 0;
	}
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "-s") == 0)
			sock = argv[i + 1];
		else if (strcmp(argv[i], "-p") == 0)
			pidfile = argv[i + 1];
		else if (strcmp(argv[i], "-n") == 0)
			nrules = atoi(argv[i + 1]);
	}
	if (!sock || nrules < 1 || nrules > 4096) {
		fprintf(stderr, "usage: logfilt -s SOCKET -p PIDFILE [-n RULES]\n");
		return 2;
	}
	struct rule *rules = calloc((size_t)nrules, sizeof *rules);
	if (!rules)
		return 1;
	for (int i = 0; i < nrules; i++)
		snprintf(rules[i].needle, sizeof rules[i].needle, "kernel: module%03d refused", i);

	int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock);
	unlink(sock);
	if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
		perror("logfilt: bind");
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: recv() returns EINTR */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (pidfile) {
		FILE *f = fopen(pidfile, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}
	char line[1024];
	unsigned long lines = 0, caught = 0;
	while (!stop) {
		ssize_t n = recv(fd, line, sizeof line - 1, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue; /* the loop checks stop */
			break;
		}
		line[n] = 0;
		caught += (unsigned long)filter_line(rules, nrules, line, (size_t)n);
		lines++;
	}
	fprintf(stderr, "logfilt: %lu lines, %lu caught\n", lines, caught);
	unlink(sock);
	return 0;
}
