/* stasim: the load side. Associates N stations round-robin over the enabled VAPs, holds them
 * until SIGTERM/SIGINT, then disassociates them.  stasim --socket PATH -n N | --version
 * Exit: 0 ok, 1 RPC refused, 2 usage, 3 stad went away. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sta.h"
#include "version.h"

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static void sta_mac(int i, char *out, size_t n)
{
	snprintf(out, n, "02:5A:%02X:%02X:%02X:%02X", (i >> 24) & 0xff, (i >> 16) & 0xff, (i >> 8) & 0xff, i & 0xff);
}

/* Disassociates stations [0, n); returns 0, or 3 if stad went away. */
static int release(int fd, char vap[][16], int nvap, int n)
{
	struct sbuf r;
	char req[96], mac[18];
	int rc = 0;
	sbuf_init(&r);
	for (int i = 0; i < n; i++) {
		sta_mac(i + 1, mac, sizeof mac);
		snprintf(req, sizeof req, "disassoc %s %s", vap[i % nvap], mac);
		if (rpc_call(fd, req, &r) < 0) {
			rc = 3;
			break;
		}
	}
	sbuf_free(&r);
	return rc;
}

int main(int argc, char **argv)
{
	const char *sock = NULL;
	int n = -1;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--version")) {
			printf("stasim %s\n", fw_git_tag + sizeof "labwarden-fw-git:" - 1);
			return 0;
		} else if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
			sock = argv[++i];
		} else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
			n = atoi(argv[++i]);
		} else {
			n = -1;
			break;
		}
	}
	if (!sock || n < 0) {
		fprintf(stderr, "usage: stasim --socket PATH -n N\n");
		return 2;
	}
	struct sigaction sa = { .sa_handler = on_signal }; /* no SA_RESTART: poll() must wake */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	struct sbuf r;
	char vap[8][16], req[96], mac[18];
	int nvap = 0;
	sbuf_init(&r);
	int fd = rpc_connect(sock);
	if (fd < 0 || rpc_call(fd, "vaps", &r)) {
		fprintf(stderr, "stasim: cannot reach stad at %s\n", sock);
		return 3;
	}
	for (char *s = strtok(r.p, " \n"); s && nvap < 8; s = strtok(NULL, " \n"))
		snprintf(vap[nvap++], sizeof vap[0], "%s", s);
	if (!nvap && n) {
		fprintf(stderr, "stasim: no enabled vaps\n");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		sta_mac(i + 1, mac, sizeof mac);
		snprintf(req, sizeof req, "assoc %s %s", vap[i % nvap], mac);
		int rc = rpc_call(fd, req, &r);
		if (rc) {
			fprintf(stderr, "stasim: %s: %s\n", req, rc < 0 ? "stad went away" : r.p);
			return rc < 0 ? 3 : (release(fd, vap, nvap, i) ? 3 : 1);
		}
	}
	printf("associated %d\n", n);
	fflush(stdout);

	while (!stop) { /* hold; a hangup means stad is gone */
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int pr = poll(&pfd, 1, 1000);
		if (pr > 0) {
			char c;
			if (read(fd, &c, 1) <= 0) {
				fprintf(stderr, "stasim: stad went away\n");
				return 3;
			}
		}
	}
	if (release(fd, vap, nvap, n)) {
		fprintf(stderr, "stasim: stad went away\n");
		return 3;
	}
	printf("disassociated %d\n", n);
	fflush(stdout);
	close(fd);
	sbuf_free(&r);
	return 0;
}
