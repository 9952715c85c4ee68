/* stad: the WiFi daemon. Single thread, poll() loop, serves the RPC on a unix socket.
 *   stad --config DIR --socket PATH | stad --calibrate | stad --version */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "sta.h"
#include "work.h"
#include "version.h"

#define MAX_CLIENTS 32
#define LINE_MAX_LEN 1024

struct client { int fd; size_t len; char buf[LINE_MAX_LEN]; };

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static int usage(void)
{
	fprintf(stderr, "usage: stad --config DIR --socket PATH | --calibrate | --version\n");
	return 2;
}

static void load_system(const char *dir)
{
	struct uci_pkg p;
	const char *w = NULL;
	if (!uci_load(dir, "system", &p))
		w = uci_get(&p, "main", "work_per_us");
	work_per_us = w && strtoull(w, NULL, 10) ? strtoull(w, NULL, 10) : work_calibrate();
	if (p.sec)
		uci_free(&p);
}

/* Handles readable data on a client; returns -1 when the client should be dropped. */
static int client_read(struct client *c, struct sbuf *payload)
{
	ssize_t r = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
	if (r < 0 && errno == EINTR)
		return 0;
	if (r <= 0)
		return -1;
	c->len += r;
	char *nl;
	while ((nl = memchr(c->buf, '\n', c->len))) {
		*nl = 0;
		if (nl > c->buf && nl[-1] == '\r')
			nl[-1] = 0;
		if (rpc_serve_line(c->fd, c->buf, payload))
			return -1;
		c->len -= nl + 1 - c->buf;
		memmove(c->buf, nl + 1, c->len);
	}
	return c->len >= sizeof c->buf - 1 ? -1 : 0; /* overlong request line */
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *sock = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--calibrate")) {
			printf("%" PRIu64 "\n", work_calibrate());
			return 0;
		} else if (!strcmp(argv[i], "--version")) {
			printf("stad %s\n", fw_git_tag + sizeof "labwarden-fw-git:" - 1);
			return 0;
		} else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
			dir = argv[++i];
		} else if (!strcmp(argv[i], "--socket") && i + 1 < argc) {
			sock = argv[++i];
		} else {
			return usage();
		}
	}
	if (!dir || !sock)
		return usage();

	load_system(dir);
	if (trace_load_config(dir))
		fprintf(stderr, "stad: no trace config in %s\n", dir);
	if (wld_load_config(dir)) {
		fprintf(stderr, "stad: cannot read %s/wireless\n", dir);
		return 1;
	}
	if (hal_open(dir))
		return 1;
	int lfd = rpc_listen(sock);
	if (lfd < 0) {
		perror("stad: listen");
		return 1;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	fprintf(stderr, "stad %s: %d vaps, work_per_us=%" PRIu64 ", listening on %s\n",
		sta_fw_version(), wld_nvaps, work_per_us, sock);

	static struct client cl[MAX_CLIENTS];
	struct pollfd pfd[MAX_CLIENTS + 2];
	struct sbuf payload;
	int ncl = 0, hfd = hal_event_fd(); /* -1 (ignored by poll) unless the HAL has events */
	sbuf_init(&payload);
	while (!stop) {
		pfd[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (int i = 0; i < ncl; i++)
			pfd[i + 1] = (struct pollfd){ .fd = cl[i].fd, .events = POLLIN };
		pfd[ncl + 1] = (struct pollfd){ .fd = hfd, .events = POLLIN };
		if (poll(pfd, ncl + 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			perror("stad: poll");
			break;
		}
		if (pfd[ncl + 1].revents & (POLLIN | POLLERR))
			hal_handle_events();
		for (int i = ncl - 1; i >= 0; i--) {
			if (!(pfd[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (client_read(&cl[i], &payload)) {
				close(cl[i].fd);
				cl[i] = cl[--ncl];
			}
		}
		if (pfd[0].revents & POLLIN) {
			int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (fd >= 0 && ncl < MAX_CLIENTS)
				cl[ncl++] = (struct client){ .fd = fd };
			else if (fd >= 0)
				close(fd);
		}
	}
	for (int i = 0; i < ncl; i++)
		close(cl[i].fd);
	close(lfd);
	unlink(sock);
	sbuf_free(&payload);
	return 0;
}
