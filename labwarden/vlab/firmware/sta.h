/* libsta: the firmware's shared library (datamodel, HAL, WiFi daemon logic, RPC, config).
 * Everything here has default visibility so it lands in .dynsym (perf, uprobes). */
#ifndef STA_H
#define STA_H
#include <stddef.h>
#include <stdint.h>

#define NOINLINE __attribute__((noinline))

/* ---- sbuf: growable reply buffer (buf.c) ---- */
struct sbuf { char *p; size_t len, cap; };
void sbuf_init(struct sbuf *b);
void sbuf_reset(struct sbuf *b);
void sbuf_free(struct sbuf *b);
void sbuf_add(struct sbuf *b, const char *s, size_t n);
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- uci: tiny UCI reader (uci.c) ---- */
struct uci_option { char name[48]; char value[128]; };
struct uci_section { char type[32]; char name[48]; int nopt; struct uci_option opt[24]; };
struct uci_pkg { int nsec; struct uci_section *sec; };
int uci_load(const char *dir, const char *pkg, struct uci_pkg *out); /* 0 ok, -1 no file */
const char *uci_get(const struct uci_pkg *p, const char *sec, const char *opt);
const char *uci_sec_get(const struct uci_section *s, const char *opt);
void uci_free(struct uci_pkg *p);

/* ---- trace: sahtrace-like zones (trace.c) ---- */
#define TRACE_ERROR   100
#define TRACE_WARNING 200
#define TRACE_NOTICE  300
#define TRACE_INFO    400
struct trace_zone { char name[96]; int level; };
int trace_load_config(const char *dir);
int trace_register_zone(const char *name, int level);
int trace_set_zone_level(const char *name, int level);
struct trace_zone *trace_get_zone(const char *name);
int zone_strcmp(const char *a, const char *b);
void trace_log(int lvl, const char *zone, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
extern unsigned long trace_emitted; /* lines written to the in-memory ring */

/* ---- dm: datamodel of AssociatedDevice objects (dm.c) ---- */
#define DM_NPARAMS 70
#define DM_NSTATIC 40 /* params [0, DM_NSTATIC) are identity/capability, the rest volatile */
#define DM_VALUE_LEN 40
struct dm_param { char value[DM_VALUE_LEN]; };
struct dm_object {
	char path[64];
	int vap;
	struct dm_param p[DM_NPARAMS];
	struct dm_object *next;
};
struct dm_trans {
	struct dm_object *obj;
	int n;
	struct { int idx; char value[DM_VALUE_LEN]; } set[DM_NPARAMS];
};
struct dm_kv { const char *key; char value[DM_VALUE_LEN]; };
extern const char *const dm_param_names[DM_NPARAMS];
extern unsigned long dm_txn_count; /* applied write transactions since start */
int dm_param_index(const char *name);
struct dm_object *dm_add_object(int vap, const char *mac);
void dm_del_object(struct dm_object *o);
int dm_count(int vap); /* vap < 0: total */
void dm_set_param_direct(struct dm_object *o, int idx, const char *value);
void dm_trans_init(struct dm_trans *t, struct dm_object *o);
int dm_trans_set(struct dm_trans *t, const char *name, const char *value);
void dm_trans_clean(struct dm_trans *t);
int dm_finalize_transaction(struct dm_trans *t);
int dm_get_object_params(const struct dm_object *o, struct dm_kv *out, int max);

/* ---- hal: simulated MXL-like vendor HAL (hal.c) ---- */
struct hal_sta_stats {
	uint64_t tx_bytes, rx_bytes, tx_packets, rx_packets, tx_ucast, rx_ucast, tx_mcast, rx_mcast;
	uint64_t tx_errors, rx_errors, tx_retrans, tx_retrans_failed, rx_retrans, tx_retry, tx_mretry;
	int signal, snr, noise, rssi[4];
	uint32_t dl_rate, ul_rate, dl_bw, ul_bw, dl_mcs, ul_mcs, inactive_ms;
	uint64_t sample_time_ns;
};
struct hal_sta_entry { unsigned char mac[6]; struct hal_sta_stats st; };
int hal_has_bulk_capability(int vap);
int hal_get_station_stats(int vap, const unsigned char mac[6], uint64_t assoc_ns, struct hal_sta_stats *out);
int hal_get_all_stations_bulk(int vap, const unsigned char (*macs)[6], int n, struct hal_sta_entry *out);
/* The HAL is chosen at build time (Makefile HAL=): hal.c is the vlab's simulated one (stations
 * arrive over the RPC); hal_nl80211.c takes the station list from the kernel and keeps it current
 * from nl80211 events, which stad's poll loop hands to hal_handle_events(). */
int hal_open(const char *config_dir); /* after wld_load_config; 0 ok, -1 (message on stderr) */
int hal_event_fd(void);               /* -1: this HAL has no events */
void hal_handle_events(void);

/* ---- wld: the WiFi daemon logic (wld.c) ---- */
#define WLD_MAX_VAPS 8
struct wld_vap;
struct wld_ad {
	unsigned char mac[6];
	char macstr[18];
	struct wld_vap *vap;
	struct dm_object *obj;
	struct hal_sta_stats live;
	uint64_t assoc_ns;
	uint64_t lastSampleTime, lastSampleSyncTime;
	int first_sync_done;
	int assoc_state, synced_assoc_state;
	struct wld_ad *next;
};
struct wld_vap {
	char name[16], device[16], ssid[33], band[8];
	int index, enabled, scaling, channel, nads;
	struct wld_ad *ads;
};
extern struct wld_vap wld_vaps[WLD_MAX_VAPS];
extern int wld_nvaps;
int wld_load_config(const char *dir);
struct wld_vap *wld_find_vap(const char *name);
int wld_assoc(struct wld_vap *v, const char *mac);
int wld_disassoc(struct wld_vap *v, const char *mac);
int wld_disassoc_all(void);
int wld_vap_get_station_stats(struct wld_vap *v);
int wld_vap_sync_assoclist(struct wld_vap *v);
void wld_ad_syncStats(struct wld_ad *ad);
void wld_ad_syncInfo(struct wld_ad *ad);
int s_addStaStatsPrologue(struct wld_vap *v);
void s_addStaStatsValues(struct sbuf *reply, struct wld_ad *ad);
int getStationStats(const char *vap, struct sbuf *reply);

/* ---- rpc (rpc.c) ---- */
int rpc_dispatch(const char *line, struct sbuf *payload); /* 0: OK payload, -1: ERR payload */
int rpc_listen(const char *path);
int rpc_connect(const char *path);
int rpc_call(int fd, const char *req, struct sbuf *reply); /* 0 OK, 1 ERR (msg in reply), -1 io */
int rpc_serve_line(int fd, const char *line, struct sbuf *payload); /* stad: send one reply */

/* ---- version (version.c) ---- */
const char *sta_fw_version(void);

#endif
