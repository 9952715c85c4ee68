/* Simulated MaxLinear-like vendor HAL. The driver side is synthetic (counters derived from the
 * MAC and time since association), the userspace side is real: per station, three
 * netlink-like round trips (GET_STATION, vendor DEV_DIAG3, vendor PEER_FLOW), each reply
 * parsed attribute by attribute with an INFO trace per attribute -- the hot trace path. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sta.h"
#include "work.h"
#include "costs.h"

#define HAL_TRACE_ZONE "pwhm.wld.sahtrace.zone.mxl.hal.nl80211.attr" /* registered last */
#define HAL_NATTR 25
#define HAL_BULK_MAX 256

enum { CMD_GET_STATION = 1, CMD_DEV_DIAG3 = 2, CMD_PEER_FLOW = 3, CMD_DUMP_STATIONS = 4 };

struct nl_attr { uint16_t type, len; uint64_t val; };
struct nl_msg { int cmd; int n; struct nl_attr a[HAL_NATTR]; };

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t mac_hash(const unsigned char mac[6])
{
	uint64_t h = 1469598103934665603ULL;
	for (int i = 0; i < 6; i++)
		h = (h ^ mac[i]) * 1099511628211ULL;
	return h;
}

/* "Kernel/driver" side: fills HAL_NATTR attributes for one command. */
static void drv_fill(int cmd, const unsigned char mac[6], uint64_t assoc_ns, struct nl_msg *m)
{
	uint64_t h = mac_hash(mac);
	uint64_t secs = (now_ns() - assoc_ns) / 1000000000ULL;
	m->cmd = cmd;
	m->n = HAL_NATTR;
	for (int i = 0; i < HAL_NATTR; i++) {
		uint64_t rate = ((h >> (i % 48)) & 0xff) + 1;
		m->a[i].type = (uint16_t)(cmd * 32 + i);
		m->a[i].len = 8;
		m->a[i].val = (h >> i) % 1000 + rate * secs;
	}
}

/* One request/reply: socket IO + driver work is the calibrated part. */
static NOINLINE int hal_nl_roundtrip(int cmd, const unsigned char mac[6], uint64_t assoc_ns, struct nl_msg *reply)
{
	work_us(COST_HAL_ROUNDTRIP_US);
	drv_fill(cmd, mac, assoc_ns, reply);
	return 0;
}

static NOINLINE void hal_parse_attrs(const struct nl_msg *m, struct hal_sta_stats *s)
{
	uint64_t h = m->n ? m->a[0].val : 0;
	for (int i = 0; i < m->n; i++) {
		const struct nl_attr *a = &m->a[i];
		trace_log(TRACE_INFO, HAL_TRACE_ZONE, "cmd %d attr %u len %u", m->cmd, a->type, a->len);
		uint64_t v = a->val;
		switch (a->type) {
		case CMD_GET_STATION * 32 + 0: s->tx_retrans = v; break;
		case CMD_GET_STATION * 32 + 1: s->tx_errors = v / 7; break;
		case CMD_GET_STATION * 32 + 2: s->rx_errors = v / 11; break;
		case CMD_GET_STATION * 32 + 3: s->dl_bw = 20u << (v % 4); break;
		case CMD_GET_STATION * 32 + 4: s->ul_bw = 20u << (v % 3); break;
		case CMD_GET_STATION * 32 + 5: s->tx_retrans_failed = v / 13; break;
		case CMD_GET_STATION * 32 + 6: s->rx_retrans = v / 3; break;
		case CMD_GET_STATION * 32 + 7: s->inactive_ms = v % 1000; break;
		case CMD_DEV_DIAG3 * 32 + 0: s->tx_packets = v * 10; break;
		case CMD_DEV_DIAG3 * 32 + 1: s->rx_packets = v * 9; break;
		case CMD_DEV_DIAG3 * 32 + 2: s->snr = 20 + (int)(v % 30); break;
		case CMD_DEV_DIAG3 * 32 + 3: s->noise = -95 + (int)(v % 5); break;
		case CMD_DEV_DIAG3 * 32 + 4: s->tx_retry = v / 2; break;
		case CMD_DEV_DIAG3 * 32 + 5: s->tx_mretry = v / 5; break;
		case CMD_DEV_DIAG3 * 32 + 6: case CMD_DEV_DIAG3 * 32 + 7:
		case CMD_DEV_DIAG3 * 32 + 8: case CMD_DEV_DIAG3 * 32 + 9:
			s->rssi[a->type - (CMD_DEV_DIAG3 * 32 + 6)] = -40 - (int)(v % 40); break;
		case CMD_PEER_FLOW * 32 + 0: s->tx_bytes = v * 1500; break;
		case CMD_PEER_FLOW * 32 + 1: s->rx_bytes = v * 1400; break;
		case CMD_PEER_FLOW * 32 + 2: s->dl_rate = 6000 + (uint32_t)(v % 1200000); break;
		case CMD_PEER_FLOW * 32 + 3: s->ul_rate = 6000 + (uint32_t)(v % 800000); break;
		case CMD_PEER_FLOW * 32 + 4: s->signal = -40 - (int)(v % 40); break;
		case CMD_PEER_FLOW * 32 + 5: s->tx_ucast = v * 9; break;
		case CMD_PEER_FLOW * 32 + 6: s->rx_ucast = v * 8; break;
		case CMD_PEER_FLOW * 32 + 7: s->tx_mcast = v; break;
		case CMD_PEER_FLOW * 32 + 8: s->rx_mcast = v; break;
		case CMD_PEER_FLOW * 32 + 9: s->dl_mcs = (uint32_t)(v % 12); break;
		case CMD_PEER_FLOW * 32 + 10: s->ul_mcs = (uint32_t)((v ^ h) % 12); break;
		default: break; /* vendor attributes the daemon does not keep */
		}
	}
}

/* The vlab HAL is MXL-like: no bulk dump, stations are pulled one by one. */
int hal_has_bulk_capability(int vap)
{
	(void)vap;
	return 0;
}

/* Stations arrive over the RPC (stasim's assoc): nothing to open, no events. */
int hal_open(const char *config_dir)
{
	(void)config_dir;
	return 0;
}

int hal_event_fd(void)
{
	return -1;
}

void hal_handle_events(void)
{
}

NOINLINE int hal_get_station_stats(int vap, const unsigned char mac[6], uint64_t assoc_ns, struct hal_sta_stats *out)
{
	static const int cmds[3] = { CMD_GET_STATION, CMD_DEV_DIAG3, CMD_PEER_FLOW };
	struct nl_msg m;
	(void)vap;
	for (int i = 0; i < 3; i++) {
		if (hal_nl_roundtrip(cmds[i], mac, assoc_ns, &m))
			return -1;
		hal_parse_attrs(&m, out);
	}
	out->sample_time_ns = now_ns();
	return 0;
}

/* Bulk pull (generic mac80211 path): one dump for the whole VAP. Never taken on the vlab
 * HAL (hal_has_bulk_capability() == 0). Stations are passed with their MACs; the synthetic
 * driver uses the VAP's oldest plausible association time. */
NOINLINE int hal_get_all_stations_bulk(int vap, const unsigned char (*macs)[6], int n, struct hal_sta_entry *out)
{
	struct hal_sta_entry *tmp = calloc(HAL_BULK_MAX, sizeof *tmp); /* max capacity, zeroed */
	struct nl_msg m;
	(void)vap;
	if (!tmp)
		return -1;
	if (n > HAL_BULK_MAX)
		n = HAL_BULK_MAX;
	work_us(COST_HAL_ROUNDTRIP_US);
	for (int i = 0; i < n; i++) {
		memcpy(tmp[i].mac, macs[i], 6);
		drv_fill(CMD_DUMP_STATIONS, macs[i], 0, &m);
		tmp[i].st.tx_bytes = m.a[0].val;
		tmp[i].st.rx_bytes = m.a[1].val;
		tmp[i].st.sample_time_ns = now_ns();
	}
	memcpy(out, tmp, n * sizeof *out); /* redundant copy of the dump */
	free(tmp);
	return n;
}
