/* nl80211 HAL (make HAL=nl80211; the qlab): the radios are the kernel's.
 * - The station list comes from the kernel: a station dump per enabled VAP at start, then the
 *   nl80211 "mlme" group's NEW_STATION / DEL_STATION events (stad's poll loop hands them to
 *   hal_handle_events); a lost event (socket overrun) resyncs from dumps.
 * - The per-station pull is three real NL80211_CMD_GET_STATION round trips, as the seed's MXL HAL
 *   made three per station (GET_STATION, DEV_DIAG3, PEER_FLOW: the kernel has no vendor commands
 *   here, so all three are GET_STATION); each reply is parsed attribute by attribute with an INFO
 *   trace per attribute -- the same hot trace path as the vlab's HAL.
 * - The bulk path (hal_get_all_stations_bulk) is the nl80211 station dump of one interface. It
 *   is taken only when `option hal_bulk '1'` is set in the `system` config: an MXL-like HAL
 *   reports no bulk capability.
 * A VAP's interface is `option ifname` of its wifi-iface section. No calibrated work here: every
 * cycle is the kernel's and libnl's. */
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/nl80211.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include "sta.h"

#define HAL_TRACE_ZONE "pwhm.wld.sahtrace.zone.mxl.hal.nl80211.attr" /* registered last */
#define HAL_ROUNDTRIPS 3

static struct nl_sock *cmd_sk, *ev_sk;
static struct nl_cb *cmd_cb;
static int nl80211_id = -1;
static unsigned vap_ifindex[WLD_MAX_VAPS];
static int bulk_capable;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void mac_str(const unsigned char *m, char out[18])
{
	snprintf(out, 18, "%02X:%02X:%02X:%02X:%02X:%02X", m[0], m[1], m[2], m[3], m[4], m[5]);
}

static struct wld_vap *vap_of_ifindex(unsigned ifindex)
{
	for (int i = 0; i < wld_nvaps; i++)
		if (vap_ifindex[i] == ifindex && wld_vaps[i].enabled)
			return &wld_vaps[i];
	return NULL;
}

/* ---- one request, its replies, its ACK ---- */

struct reply {
	int (*on_msg)(struct nlattr **tb, void *arg);
	void *arg;
	int err, done;
};

static int cb_valid(struct nl_msg *msg, void *arg)
{
	struct reply *r = arg;
	struct genlmsghdr *gnlh = nlmsg_data(nlmsg_hdr(msg));
	struct nlattr *tb[NL80211_ATTR_MAX + 1];
	nla_parse(tb, NL80211_ATTR_MAX, genlmsg_attrdata(gnlh, 0), genlmsg_attrlen(gnlh, 0), NULL);
	if (r->on_msg)
		r->on_msg(tb, r->arg);
	return NL_SKIP;
}

static int cb_finish(struct nl_msg *msg, void *arg)
{
	(void)msg;
	((struct reply *)arg)->done = 1;
	return NL_SKIP;
}

static int cb_ack(struct nl_msg *msg, void *arg)
{
	(void)msg;
	((struct reply *)arg)->done = 1;
	return NL_STOP;
}

static int cb_error(struct sockaddr_nl *nla, struct nlmsgerr *e, void *arg)
{
	struct reply *r = arg;
	(void)nla;
	r->err = e->error;
	r->done = 1;
	return NL_STOP;
}

/* GET_STATION for one MAC (mac != NULL) or the dump of an interface; 0 or -errno */
static int get_station(unsigned ifindex, const unsigned char *mac, struct reply *r)
{
	struct nl_msg *msg = nlmsg_alloc();
	if (!msg)
		return -ENOMEM;
	genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, nl80211_id, 0, mac ? 0 : NLM_F_DUMP,
		    NL80211_CMD_GET_STATION, 0);
	nla_put_u32(msg, NL80211_ATTR_IFINDEX, ifindex);
	if (mac)
		nla_put(msg, NL80211_ATTR_MAC, 6, mac);
	nl_cb_set(cmd_cb, NL_CB_VALID, NL_CB_CUSTOM, cb_valid, r);
	nl_cb_set(cmd_cb, NL_CB_FINISH, NL_CB_CUSTOM, cb_finish, r);
	nl_cb_set(cmd_cb, NL_CB_ACK, NL_CB_CUSTOM, cb_ack, r);
	nl_cb_err(cmd_cb, NL_CB_CUSTOM, cb_error, r);
	r->err = r->done = 0;
	int rc = nl_send_auto(cmd_sk, msg);
	nlmsg_free(msg);
	if (rc < 0)
		return -EIO;
	while (!r->done)
		if (nl_recvmsgs(cmd_sk, cmd_cb) < 0 && !r->done)
			return -EIO;
	return r->err;
}

/* ---- the per-station pull ---- */

static void parse_rate(struct nlattr *rate, uint32_t *kbps, uint32_t *mcs)
{
	struct nlattr *a;
	int rem;
	nla_for_each_nested(a, rate, rem) {
		trace_log(TRACE_INFO, HAL_TRACE_ZONE, "rate attr %d len %d", nla_type(a), nla_len(a));
		if (nla_type(a) == NL80211_RATE_INFO_BITRATE32)
			*kbps = nla_get_u32(a) * 100; /* units of 100 kbit/s */
		else if (nla_type(a) == NL80211_RATE_INFO_MCS)
			*mcs = nla_get_u8(a);
	}
}

/* One GET_STATION reply's NL80211_ATTR_STA_INFO, attribute by attribute. */
static NOINLINE void hal_parse_attrs(struct nlattr *info, struct hal_sta_stats *s)
{
	struct nlattr *a;
	int rem, k = 0;
	nla_for_each_nested(a, info, rem) {
		int t = nla_type(a);
		trace_log(TRACE_INFO, HAL_TRACE_ZONE, "sta attr %d len %d", t, nla_len(a));
		switch (t) {
		case NL80211_STA_INFO_INACTIVE_TIME: s->inactive_ms = nla_get_u32(a); break;
		case NL80211_STA_INFO_RX_BYTES64: s->rx_bytes = nla_get_u64(a); break;
		case NL80211_STA_INFO_TX_BYTES64: s->tx_bytes = nla_get_u64(a); break;
		case NL80211_STA_INFO_RX_PACKETS: s->rx_packets = nla_get_u32(a); s->rx_ucast = s->rx_packets; break;
		case NL80211_STA_INFO_TX_PACKETS: s->tx_packets = nla_get_u32(a); s->tx_ucast = s->tx_packets; break;
		case NL80211_STA_INFO_TX_RETRIES: s->tx_retrans = s->tx_retry = nla_get_u32(a); break;
		case NL80211_STA_INFO_TX_FAILED: s->tx_errors = s->tx_retrans_failed = nla_get_u32(a); break;
		case NL80211_STA_INFO_RX_DROP_MISC: s->rx_errors = nla_get_u64(a); break;
		case NL80211_STA_INFO_BEACON_LOSS: s->tx_mretry = nla_get_u32(a); break;
		case NL80211_STA_INFO_SIGNAL: s->signal = (int8_t)nla_get_u8(a); s->snr = s->signal + 95; break;
		case NL80211_STA_INFO_SIGNAL_AVG: s->rssi[k++ & 3] = (int8_t)nla_get_u8(a); break;
		case NL80211_STA_INFO_TX_BITRATE: parse_rate(a, &s->dl_rate, &s->dl_mcs); break;
		case NL80211_STA_INFO_RX_BITRATE: parse_rate(a, &s->ul_rate, &s->ul_mcs); break;
		default: break; /* attributes the daemon does not keep */
		}
	}
	s->noise = -95;
	s->dl_bw = s->ul_bw = 20;
}

static int on_station(struct nlattr **tb, void *arg)
{
	if (tb[NL80211_ATTR_STA_INFO])
		hal_parse_attrs(tb[NL80211_ATTR_STA_INFO], arg);
	return 0;
}

/* One request/reply with the kernel. */
static NOINLINE int hal_nl_roundtrip(unsigned ifindex, const unsigned char mac[6], struct hal_sta_stats *out)
{
	struct reply r = { .on_msg = on_station, .arg = out };
	return get_station(ifindex, mac, &r);
}

NOINLINE int hal_get_station_stats(int vap, const unsigned char mac[6], uint64_t assoc_ns, struct hal_sta_stats *out)
{
	(void)assoc_ns;
	if (vap < 0 || vap >= wld_nvaps || !vap_ifindex[vap])
		return -1;
	for (int i = 0; i < HAL_ROUNDTRIPS; i++)
		if (hal_nl_roundtrip(vap_ifindex[vap], mac, out))
			return -1; /* gone: its DEL_STATION event is on its way */
	out->sample_time_ns = now_ns();
	return 0;
}

/* ---- the bulk path: one station dump ---- */

struct dump { struct hal_sta_entry *e; int n, max; };

static int on_dump_station(struct nlattr **tb, void *arg)
{
	struct dump *d = arg;
	if (d->n >= d->max || !tb[NL80211_ATTR_MAC])
		return 0;
	struct hal_sta_entry *e = &d->e[d->n++];
	memset(e, 0, sizeof *e);
	memcpy(e->mac, nla_data(tb[NL80211_ATTR_MAC]), 6);
	if (tb[NL80211_ATTR_STA_INFO])
		hal_parse_attrs(tb[NL80211_ATTR_STA_INFO], &e->st);
	return 0;
}

int hal_has_bulk_capability(int vap)
{
	(void)vap;
	return bulk_capable;
}

/* Fills out[i] for macs[i] (the daemon's order, not the kernel's); returns n. */
NOINLINE int hal_get_all_stations_bulk(int vap, const unsigned char (*macs)[6], int n, struct hal_sta_entry *out)
{
	if (vap < 0 || vap >= wld_nvaps || !vap_ifindex[vap] || n <= 0)
		return n <= 0 ? 0 : -1;
	struct dump d = { .e = calloc(n + 16, sizeof *d.e), .max = n + 16 };
	struct reply r = { .on_msg = on_dump_station, .arg = &d };
	if (!d.e || get_station(vap_ifindex[vap], NULL, &r)) {
		free(d.e);
		return -1;
	}
	uint64_t t = now_ns();
	for (int i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof out[i]);
		memcpy(out[i].mac, macs[i], 6);
		for (int j = 0; j < d.n; j++)
			if (!memcmp(d.e[j].mac, macs[i], 6)) {
				out[i].st = d.e[j].st;
				break;
			}
		out[i].st.sample_time_ns = t;
	}
	free(d.e);
	return n;
}

/* ---- the station list ---- */

struct macs { unsigned char (*m)[6]; int n, max; };

static int on_dump_mac(struct nlattr **tb, void *arg)
{
	struct macs *l = arg;
	if (tb[NL80211_ATTR_MAC] && l->n < l->max)
		memcpy(l->m[l->n++], nla_data(tb[NL80211_ATTR_MAC]), 6);
	return 0;
}

/* Make every enabled VAP's list the kernel's: add what it has, drop what it has not. */
static void resync(void)
{
	static unsigned char buf[1024][6];
	char m[18];
	for (int i = 0; i < wld_nvaps; i++) {
		struct wld_vap *v = &wld_vaps[i];
		struct macs l = { .m = buf, .max = 1024 };
		struct reply r = { .on_msg = on_dump_mac, .arg = &l };
		if (!v->enabled || !vap_ifindex[i] || get_station(vap_ifindex[i], NULL, &r))
			continue;
		for (int j = 0; j < l.n; j++) {
			mac_str(l.m[j], m);
			wld_assoc(v, m); /* -2: already held */
		}
		for (struct wld_ad *ad = v->ads, *next; ad; ad = next) {
			int found = 0;
			next = ad->next;
			for (int j = 0; j < l.n && !found; j++)
				found = !memcmp(l.m[j], ad->mac, 6);
			if (!found)
				wld_disassoc(v, ad->macstr);
		}
	}
}

static int on_event(struct nl_msg *msg, void *arg)
{
	struct genlmsghdr *gnlh = nlmsg_data(nlmsg_hdr(msg));
	struct nlattr *tb[NL80211_ATTR_MAX + 1];
	char m[18];
	(void)arg;
	if (gnlh->cmd != NL80211_CMD_NEW_STATION && gnlh->cmd != NL80211_CMD_DEL_STATION)
		return NL_SKIP;
	nla_parse(tb, NL80211_ATTR_MAX, genlmsg_attrdata(gnlh, 0), genlmsg_attrlen(gnlh, 0), NULL);
	if (!tb[NL80211_ATTR_IFINDEX] || !tb[NL80211_ATTR_MAC])
		return NL_SKIP;
	struct wld_vap *v = vap_of_ifindex(nla_get_u32(tb[NL80211_ATTR_IFINDEX]));
	if (!v)
		return NL_SKIP;
	mac_str(nla_data(tb[NL80211_ATTR_MAC]), m);
	if (gnlh->cmd == NL80211_CMD_NEW_STATION)
		wld_assoc(v, m);
	else
		wld_disassoc(v, m);
	return NL_SKIP;
}

int hal_event_fd(void)
{
	return ev_sk ? nl_socket_get_fd(ev_sk) : -1;
}

void hal_handle_events(void)
{
	int rc = nl_recvmsgs_default(ev_sk);
	if (rc < 0 && rc != -NLE_AGAIN) {
		fprintf(stderr, "stad: nl80211 events: %s: resyncing from station dumps\n", nl_geterror(rc));
		resync();
	}
}

static int map_vaps(const char *dir)
{
	struct uci_pkg p;
	if (uci_load(dir, "wireless", &p))
		return -1;
	for (int i = 0; i < wld_nvaps; i++) {
		const char *ifname = uci_get(&p, wld_vaps[i].name, "ifname");
		vap_ifindex[i] = ifname ? if_nametoindex(ifname) : 0;
		if (wld_vaps[i].enabled && !vap_ifindex[i])
			fprintf(stderr, "stad: %s: no interface '%s' (option ifname): it holds no stations\n",
				wld_vaps[i].name, ifname ? ifname : "");
	}
	uci_free(&p);
	if (!uci_load(dir, "system", &p)) {
		const char *b = uci_get(&p, "main", "hal_bulk");
		bulk_capable = b && !strcmp(b, "1");
		uci_free(&p);
	}
	return 0;
}

int hal_open(const char *config_dir)
{
	int grp;
	if (map_vaps(config_dir)) {
		fprintf(stderr, "stad: cannot read %s/wireless\n", config_dir);
		return -1;
	}
	cmd_sk = nl_socket_alloc();
	ev_sk = nl_socket_alloc();
	cmd_cb = nl_cb_alloc(NL_CB_DEFAULT);
	if (!cmd_sk || !ev_sk || !cmd_cb || genl_connect(cmd_sk) || genl_connect(ev_sk)) {
		fprintf(stderr, "stad: cannot open generic netlink sockets\n");
		return -1;
	}
	nl80211_id = genl_ctrl_resolve(cmd_sk, "nl80211");
	grp = genl_ctrl_resolve_grp(cmd_sk, "nl80211", "mlme");
	if (nl80211_id < 0 || grp < 0) {
		fprintf(stderr, "stad: nl80211 is not available (no cfg80211 in this kernel?)\n");
		return -1;
	}
	nl_socket_disable_seq_check(ev_sk);
	nl_socket_modify_cb(ev_sk, NL_CB_VALID, NL_CB_CUSTOM, on_event, NULL);
	nl_socket_set_buffer_size(ev_sk, 1 << 20, 0);
	if (nl_socket_add_membership(ev_sk, grp) || nl_socket_set_nonblocking(ev_sk)) {
		fprintf(stderr, "stad: cannot subscribe to nl80211 events\n");
		return -1;
	}
	resync(); /* after subscribing: a station that arrives in between is in one or the other */
	return 0;
}
