/* The WiFi daemon logic (pwhm/wld-like): VAPs, associated devices, and the getStationStats
 * RPC whose per-poll datamodel write-back is the mechanism under study:
 *   getStationStats -> s_addStaStatsPrologue -> HAL pull per station
 *                                            -> wld_vap_sync_assoclist -> wld_ad_syncStats
 *                                                                      -> wld_ad_syncInfo -> dm_finalize_transaction
 *                   -> s_addStaStatsValues (per station) -> dm_get_object_params */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sta.h"
#include "work.h"
#include "costs.h"

struct wld_vap wld_vaps[WLD_MAX_VAPS];
int wld_nvaps;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Value of volatile param DM_NSTATIC + k from a driver sample. Shared by the datamodel
 * write (syncStats) and any reply built from live state, so both always agree. */
static void ad_volatile_value(const struct hal_sta_stats *s, int k, char *out)
{
	const uint64_t u[] = { s->tx_bytes, s->rx_bytes, s->tx_packets, s->rx_packets, s->tx_ucast,
			       s->rx_ucast, s->tx_mcast, s->rx_mcast, s->tx_errors, s->rx_errors,
			       s->tx_retrans, s->tx_retrans_failed, s->rx_retrans, s->tx_retry, s->tx_mretry };
	const int nu = sizeof u / sizeof u[0];
	if (k < nu) {
		snprintf(out, DM_VALUE_LEN, "%llu", (unsigned long long)u[k]);
		return;
	}
	const long long v[] = { s->signal, s->snr, s->noise, s->rssi[0], s->rssi[1], s->rssi[2],
				s->rssi[3], s->dl_rate, s->ul_rate, s->dl_bw, s->ul_bw, s->dl_mcs,
				s->ul_mcs, s->inactive_ms, (long long)(s->sample_time_ns / 1000000) };
	snprintf(out, DM_VALUE_LEN, "%lld", v[k - nu]);
}

/* ---- the write-back (syncStats + syncInfo) ---- */

/* Volatile counters: written directly, every sample. */
NOINLINE void wld_ad_syncStats(struct wld_ad *ad)
{
	char val[DM_VALUE_LEN];
	work_us(COST_SYNCSTATS_US);
	for (int k = 0; k < DM_NPARAMS - DM_NSTATIC; k++) {
		ad_volatile_value(&ad->live, k, val);
		dm_set_param_direct(ad->obj, DM_NSTATIC + k, val);
	}
}

/* The ~40 identity/capability params: constant for an association. */
static NOINLINE void wld_ad_buildStaticParams(struct wld_ad *ad, struct dm_trans *t)
{
	static const char *const std[] = { "n", "ac", "ax", "be" };
	uint64_t h = 0;
	char val[DM_VALUE_LEN];
	for (int i = 0; i < 6; i++)
		h = h * 131 + ad->mac[i];
	work_us(COST_SYNCINFO_BUILD_US);
	for (int i = 0; i < DM_NSTATIC; i++) {
		if (i == 0)
			snprintf(val, sizeof val, "%s", ad->macstr);
		else if (i == 3)
			snprintf(val, sizeof val, "%s", std[h % 4]);
		else if (i == 26)
			snprintf(val, sizeof val, "%s", ad->vap->band);
		else if (i == 27)
			snprintf(val, sizeof val, "%llu", (unsigned long long)(ad->assoc_ns / 1000000000ULL));
		else if (i == 28)
			snprintf(val, sizeof val, "%s", ad->vap->name);
		else
			snprintf(val, sizeof val, "%llu", (unsigned long long)((h >> (i % 32)) % 1000));
		dm_trans_set(t, dm_param_names[i], val);
	}
}

NOINLINE void wld_ad_syncInfo(struct wld_ad *ad)
{
	struct dm_trans t;
	dm_trans_init(&t, ad->obj);
	/* Freshness gate: every poll pulls a new driver sample, so this is always true and the
	 * whole static block is rebuilt and applied once per station per poll. */
	if (ad->lastSampleSyncTime != ad->lastSampleTime) {
		wld_ad_buildStaticParams(ad, &t);
		dm_finalize_transaction(&t);
	} else {
		dm_trans_clean(&t);
	}
	ad->lastSampleSyncTime = ad->lastSampleTime;
}

NOINLINE int wld_vap_sync_assoclist(struct wld_vap *v)
{
	int n = 0;
	for (struct wld_ad *ad = v->ads; ad; ad = ad->next, n++) {
		wld_ad_syncStats(ad);
		wld_ad_syncInfo(ad);
	}
	return n;
}

/* ---- driver pull ---- */

NOINLINE int wld_vap_get_station_stats(struct wld_vap *v)
{
	if (hal_has_bulk_capability(v->index) && v->nads) {
		unsigned char (*macs)[6] = calloc(v->nads, 6);
		struct hal_sta_entry *e = calloc(v->nads, sizeof *e);
		int i = 0, n;
		if (!macs || !e) {
			free(macs);
			free(e);
			return -1;
		}
		for (struct wld_ad *ad = v->ads; ad; ad = ad->next)
			memcpy(macs[i++], ad->mac, 6);
		n = hal_get_all_stations_bulk(v->index, (const unsigned char (*)[6])macs, i, e);
		i = 0;
		for (struct wld_ad *ad = v->ads; ad && i < n; ad = ad->next, i++) {
			ad->live = e[i].st;
			ad->lastSampleTime = e[i].st.sample_time_ns;
		}
		free(macs);
		free(e);
		return 0;
	}
	for (struct wld_ad *ad = v->ads; ad; ad = ad->next) /* MXL: one by one */
		if (!hal_get_station_stats(v->index, ad->mac, ad->assoc_ns, &ad->live))
			ad->lastSampleTime = ad->live.sample_time_ns;
	return 0;
}

/* ---- config and association ---- */

int wld_load_config(const char *dir)
{
	struct uci_pkg p;
	if (uci_load(dir, "wireless", &p))
		return -1;
	wld_nvaps = 0;
	for (int i = 0; i < p.nsec && wld_nvaps < WLD_MAX_VAPS; i++) {
		const struct uci_section *s = &p.sec[i];
		if (strcmp(s->type, "wifi-iface"))
			continue;
		struct wld_vap *v = &wld_vaps[wld_nvaps];
		const char *dev = uci_sec_get(s, "device"), *ssid = uci_sec_get(s, "ssid");
		const char *dis = uci_sec_get(s, "disabled"), *sc = uci_sec_get(s, "scaling");
		memset(v, 0, sizeof *v);
		snprintf(v->name, sizeof v->name, "%.*s", (int)sizeof v->name - 1, s->name);
		snprintf(v->device, sizeof v->device, "%.*s", (int)sizeof v->device - 1, dev ? dev : "");
		snprintf(v->ssid, sizeof v->ssid, "%.*s", (int)sizeof v->ssid - 1, ssid ? ssid : "");
		v->index = wld_nvaps++;
		v->enabled = !(dis && !strcmp(dis, "1"));
		v->scaling = sc && !strcmp(sc, "1");
		const char *ch = dev ? uci_get(&p, dev, "channel") : NULL;
		const char *band = dev ? uci_get(&p, dev, "band") : NULL;
		v->channel = ch ? atoi(ch) : 0;
		snprintf(v->band, sizeof v->band, "%.*s", (int)sizeof v->band - 1, band ? band : "");
	}
	uci_free(&p);
	return 0;
}

struct wld_vap *wld_find_vap(const char *name)
{
	for (int i = 0; i < wld_nvaps; i++)
		if (!strcmp(wld_vaps[i].name, name))
			return &wld_vaps[i];
	return NULL;
}

static int parse_mac(const char *s, unsigned char mac[6])
{
	unsigned m[6];
	char tail;
	if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5], &tail) != 6)
		return -1;
	for (int i = 0; i < 6; i++)
		mac[i] = (unsigned char)m[i];
	return 0;
}

static struct wld_ad *find_ad(const unsigned char mac[6], struct wld_vap **vout)
{
	for (int i = 0; i < wld_nvaps; i++)
		for (struct wld_ad *ad = wld_vaps[i].ads; ad; ad = ad->next)
			if (!memcmp(ad->mac, mac, 6)) {
				if (vout)
					*vout = &wld_vaps[i];
				return ad;
			}
	return NULL;
}

/* 0 ok, -1 bad MAC, -2 already associated, -3 no memory */
int wld_assoc(struct wld_vap *v, const char *mac)
{
	unsigned char m[6];
	if (parse_mac(mac, m))
		return -1;
	if (find_ad(m, NULL))
		return -2;
	struct wld_ad *ad = calloc(1, sizeof *ad);
	if (!ad)
		return -3;
	memcpy(ad->mac, m, 6);
	snprintf(ad->macstr, sizeof ad->macstr, "%02X:%02X:%02X:%02X:%02X:%02X", m[0], m[1], m[2], m[3], m[4], m[5]);
	ad->vap = v;
	ad->assoc_ns = now_ns();
	ad->assoc_state = 1;
	ad->obj = dm_add_object(v->index, ad->macstr);
	if (!ad->obj) {
		free(ad);
		return -3;
	}
	struct wld_ad **pp = &v->ads; /* keep association order */
	while (*pp)
		pp = &(*pp)->next;
	*pp = ad;
	v->nads++;
	return 0;
}

static void ad_free(struct wld_vap *v, struct wld_ad *ad)
{
	for (struct wld_ad **pp = &v->ads; *pp; pp = &(*pp)->next)
		if (*pp == ad) {
			*pp = ad->next;
			break;
		}
	v->nads--;
	dm_del_object(ad->obj);
	free(ad);
}

/* 0 ok, -1 bad MAC, -2 not associated on that VAP */
int wld_disassoc(struct wld_vap *v, const char *mac)
{
	unsigned char m[6];
	struct wld_vap *owner = NULL;
	if (parse_mac(mac, m))
		return -1;
	struct wld_ad *ad = find_ad(m, &owner);
	if (!ad || owner != v)
		return -2;
	ad_free(v, ad);
	return 0;
}

int wld_disassoc_all(void)
{
	int n = 0;
	for (int i = 0; i < wld_nvaps; i++)
		while (wld_vaps[i].ads) {
			ad_free(&wld_vaps[i], wld_vaps[i].ads);
			n++;
		}
	return n;
}

/* ---- the RPC ---- */

static struct wld_vap *rpc_vap(const char *name, struct sbuf *reply)
{
	struct wld_vap *v = wld_find_vap(name);
	if (!v)
		sbuf_printf(reply, "unknown vap %s", name);
	else if (!v->enabled)
		sbuf_printf(reply, "vap %s disabled", name), v = NULL;
	return v;
}

/* Driver pull and datamodel write-back, shared by every stats reply. */
NOINLINE int s_addStaStatsPrologue(struct wld_vap *v)
{
	if (wld_vap_get_station_stats(v))
		return -1;
	return wld_vap_sync_assoclist(v);
}

/* Full reply: one line per station, every AssociatedDevice param read back from the DM. */
NOINLINE void s_addStaStatsValues(struct sbuf *reply, struct wld_ad *ad)
{
	struct dm_kv kv[DM_NPARAMS];
	int n = dm_get_object_params(ad->obj, kv, DM_NPARAMS);
	work_us(COST_MARSHAL_US);
	for (int i = 0; i < n; i++)
		sbuf_printf(reply, "%s%s=%s", i ? " " : "", kv[i].key, kv[i].value);
	sbuf_add(reply, "\n", 1);
}

NOINLINE int getStationStats(const char *vap, struct sbuf *reply)
{
	struct wld_vap *v = rpc_vap(vap, reply);
	if (!v)
		return -1;
	if (s_addStaStatsPrologue(v) < 0) {
		sbuf_printf(reply, "hal pull failed on %s", vap);
		return -1;
	}
	for (struct wld_ad *ad = v->ads; ad; ad = ad->next)
		s_addStaStatsValues(reply, ad);
	return 0;
}
