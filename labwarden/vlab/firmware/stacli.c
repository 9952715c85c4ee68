/* stacli: the DUT-side RPC client of stad (what `ubus call` is on OpenWrt), so host tools can
 * query the datamodel over SSH with an argv, never a shell string.
 *   stacli --socket PATH METHOD [ARG...]   e.g. stacli --socket /var/run/stad.sock count
 * Prints the reply payload. Exit: 0 OK, 1 ERR reply (message on stderr), 2 usage, 3 no stad. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "sta.h"
#include "version.h"

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "--version")) {
		printf("stacli %s\n", fw_git_tag + sizeof "labwarden-fw-git:" - 1);
		return 0;
	}
	if (argc < 4 || strcmp(argv[1], "--socket")) {
		fprintf(stderr, "usage: stacli --socket PATH METHOD [ARG...]\n");
		return 2;
	}
	char req[512] = "";
	size_t used = 0;
	for (int i = 3; i < argc; i++) {
		/* one request line: an argument may not carry the line's separators */
		if (strpbrk(argv[i], " \n\r") || used + strlen(argv[i]) + 2 > sizeof req) {
			fprintf(stderr, "stacli: bad argument %d: spaces/newlines not allowed\n", i - 2);
			return 2;
		}
		used += (size_t)snprintf(req + used, sizeof req - used, "%s%s", i > 3 ? " " : "", argv[i]);
	}
	int fd = rpc_connect(argv[2]);
	if (fd < 0) {
		fprintf(stderr, "stacli: stad is not answering on %s\n", argv[2]);
		return 3;
	}
	struct sbuf reply;
	sbuf_init(&reply);
	int rc = rpc_call(fd, req, &reply);
	close(fd);
	if (rc < 0) {
		fprintf(stderr, "stacli: stad closed the connection\n");
		return 3;
	}
	fwrite(reply.p, 1, reply.len, rc ? stderr : stdout);
	if (rc)
		fputc('\n', stderr);
	sbuf_free(&reply);
	return rc ? 1 : 0;
}
