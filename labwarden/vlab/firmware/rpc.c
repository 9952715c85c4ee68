/* RPC over a unix stream socket: request `METHOD arg...\n`, reply `OK <nbytes>\n<payload>` or
 * `ERR <message>\n`. Several requests may share one connection. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "sta.h"

static int rpc_count(struct sbuf *out)
{
	sbuf_printf(out, "total=%d", dm_count(-1));
	for (int i = 0; i < wld_nvaps; i++)
		sbuf_printf(out, " %s=%d", wld_vaps[i].name, dm_count(wld_vaps[i].index));
	sbuf_add(out, "\n", 1);
	return 0;
}

static int rpc_list(const char *vap, struct sbuf *out)
{
	if (vap && !wld_find_vap(vap)) {
		sbuf_printf(out, "unknown vap %s", vap);
		return -1;
	}
	for (int i = 0; i < wld_nvaps; i++) {
		if (vap && strcmp(vap, wld_vaps[i].name))
			continue;
		for (struct wld_ad *ad = wld_vaps[i].ads; ad; ad = ad->next)
			sbuf_printf(out, "%s %s\n", wld_vaps[i].name, ad->macstr);
	}
	return 0;
}

static int rpc_assoc(int on, const char *vap, const char *mac, struct sbuf *out)
{
	static const char *const why[] = { "", "bad mac", "already associated", "no memory" };
	struct wld_vap *v = vap ? wld_find_vap(vap) : NULL;
	if (!v || !mac) {
		sbuf_printf(out, "usage: %s vapN MAC", on ? "assoc" : "disassoc");
		return -1;
	}
	if (on && !v->enabled) {
		sbuf_printf(out, "vap %s disabled", vap);
		return -1;
	}
	int rc = on ? wld_assoc(v, mac) : wld_disassoc(v, mac);
	if (rc) {
		sbuf_printf(out, "%s", on ? why[-rc] : rc == -1 ? "bad mac" : "not associated");
		return -1;
	}
	return 0;
}

int rpc_dispatch(const char *line, struct sbuf *out)
{
	char m[32] = "", a1[32] = "", a2[32] = "";
	int n = sscanf(line, "%31s %31s %31s", m, a1, a2);
	if (n < 1) {
		sbuf_printf(out, "empty request");
		return -1;
	}
	if (!strcmp(m, "getStationStats") && n >= 2)
		return getStationStats(a1, out);
	if (!strcmp(m, "assoc") || !strcmp(m, "disassoc"))
		return rpc_assoc(m[0] == 'a', n >= 2 ? a1 : NULL, n >= 3 ? a2 : NULL, out);
	if (!strcmp(m, "disassocAll")) {
		sbuf_printf(out, "%d\n", wld_disassoc_all());
		return 0;
	}
	if (!strcmp(m, "count"))
		return rpc_count(out);
	if (!strcmp(m, "list"))
		return rpc_list(n >= 2 ? a1 : NULL, out);
	if (!strcmp(m, "vaps")) {
		for (int i = 0, k = 0; i < wld_nvaps; i++)
			if (wld_vaps[i].enabled)
				sbuf_printf(out, "%s%s", k++ ? " " : "", wld_vaps[i].name);
		sbuf_add(out, "\n", 1);
		return 0;
	}
	if (!strcmp(m, "version")) {
		sbuf_printf(out, "stad %s\n", sta_fw_version());
		return 0;
	}
	sbuf_printf(out, "unknown method %s", m);
	return -1;
}

int rpc_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16)) {
		close(fd);
		return -1;
	}
	return fd;
}

int rpc_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path)
		return -1;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		return -1;
	}
	return fd;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

/* Reads one byte at a time until '\n' (header only; payload is read in bulk). */
static int read_line(int fd, char *buf, size_t max)
{
	size_t n = 0;
	while (n + 1 < max) {
		ssize_t r = read(fd, buf + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = 0;
	return 0;
}

int rpc_call(int fd, const char *req, struct sbuf *reply)
{
	char hdr[256];
	sbuf_reset(reply);
	if (write_all(fd, req, strlen(req)) || write_all(fd, "\n", 1) || read_line(fd, hdr, sizeof hdr))
		return -1;
	if (!strncmp(hdr, "ERR ", 4)) {
		sbuf_add(reply, hdr + 4, strlen(hdr + 4));
		return 1;
	}
	if (strncmp(hdr, "OK ", 3))
		return -1;
	size_t want = strtoul(hdr + 3, NULL, 10);
	char chunk[16384];
	while (reply->len < want) {
		size_t n = want - reply->len < sizeof chunk ? want - reply->len : sizeof chunk;
		ssize_t r = read(fd, chunk, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		sbuf_add(reply, chunk, r);
	}
	return 0;
}

/* Server side: formats and sends the reply for one request line. */
int rpc_serve_line(int fd, const char *line, struct sbuf *payload)
{
	char hdr[64];
	sbuf_reset(payload);
	if (rpc_dispatch(line, payload)) {
		for (size_t i = 0; i < payload->len; i++) /* ERR message stays on one line */
			if (payload->p[i] == '\n')
				payload->p[i] = ' ';
		return write_all(fd, "ERR ", 4) || write_all(fd, payload->p ? payload->p : "", payload->len) ||
		       write_all(fd, "\n", 1) ? -1 : 0;
	}
	int n = snprintf(hdr, sizeof hdr, "OK %zu\n", payload->len);
	return write_all(fd, hdr, n) || write_all(fd, payload->p ? payload->p : "", payload->len) ? -1 : 0;
}
