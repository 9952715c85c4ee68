/* Datamodel: WiFi.AccessPoint.{i}.AssociatedDevice.{j} objects with 70 params each
 * (40 identity/capability, 30 volatile). Writes go through transactions; applying one
 * (dm_finalize_transaction) is the expensive step the study counts with a uprobe. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sta.h"
#include "work.h"
#include "costs.h"

const char *const dm_param_names[DM_NPARAMS] = {
	/* static: identity and capabilities, fixed for the life of an association */
	"MACAddress", "Active", "AuthenticationState", "OperatingStandard", "SupportedStandards",
	"Capabilities", "HtCapabilities", "VhtCapabilities", "HeCapabilities", "EhtCapabilities",
	"MaxRxSpatialStreamsSupported", "MaxTxSpatialStreamsSupported", "MaxDownlinkRateSupported",
	"MaxUplinkRateSupported", "MaxBandwidthSupported", "DeviceType", "DevicePriority",
	"EncryptionMode", "SecurityModeEnabled", "MUMimoRxSupported", "MUMimoTxSupported",
	"SUBeamformerSupported", "SUBeamformeeSupported", "MUBeamformerSupported",
	"MUBeamformeeSupported", "ChannelWidth", "Band", "AssociationTime", "LinkName",
	"AffiliatedSta", "VendorOUI", "VendorName", "ClientType", "PowerSave", "UAPSDCapable",
	"RRMCapabilities", "BTMCapable", "WNMCapable", "MLOMode", "ConnectionID",
	/* volatile: refreshed from every driver sample */
	"TxBytes", "RxBytes", "TxPacketCount", "RxPacketCount", "TxUnicastPacketCount",
	"RxUnicastPacketCount", "TxMulticastPacketCount", "RxMulticastPacketCount", "TxErrors",
	"RxErrors", "Tx_Retransmissions", "Tx_RetransmissionsFailed", "Rx_Retransmissions",
	"Tx_RetryCount", "Tx_MultipleRetryCount", "SignalStrength", "SignalNoiseRatio", "Noise",
	"RSSI0", "RSSI1", "RSSI2", "RSSI3", "LastDataDownlinkRate", "LastDataUplinkRate",
	"DownlinkBandwidth", "UplinkBandwidth", "DownlinkMCS", "UplinkMCS", "Inactive",
	"LastSampleTime",
};

static struct dm_object *objects;
static int nobj[WLD_MAX_VAPS];
static unsigned next_instance[WLD_MAX_VAPS];
unsigned long dm_txn_count;

int dm_param_index(const char *name)
{
	for (int i = 0; i < DM_NPARAMS; i++)
		if (!strcmp(dm_param_names[i], name))
			return i;
	return -1;
}

struct dm_object *dm_add_object(int vap, const char *mac)
{
	if (vap < 0 || vap >= WLD_MAX_VAPS)
		return NULL;
	struct dm_object *o = calloc(1, sizeof *o);
	if (!o)
		return NULL;
	o->vap = vap;
	snprintf(o->path, sizeof o->path, "WiFi.AccessPoint.%d.AssociatedDevice.%u.", vap + 1,
		 ++next_instance[vap]);
	snprintf(o->p[0].value, DM_VALUE_LEN, "%s", mac);
	o->next = objects;
	objects = o;
	nobj[vap]++;
	return o;
}

void dm_del_object(struct dm_object *o)
{
	for (struct dm_object **pp = &objects; *pp; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			nobj[o->vap]--;
			free(o);
			return;
		}
}

int dm_count(int vap)
{
	int n = 0;
	for (int i = 0; i < WLD_MAX_VAPS; i++)
		if (vap < 0 || vap == i)
			n += nobj[i];
	return n;
}

/* Volatile counters bypass transactions (no validation, no change events). */
void dm_set_param_direct(struct dm_object *o, int idx, const char *value)
{
	if (idx >= 0 && idx < DM_NPARAMS)
		snprintf(o->p[idx].value, DM_VALUE_LEN, "%s", value);
}

void dm_trans_init(struct dm_trans *t, struct dm_object *o)
{
	t->obj = o;
	t->n = 0;
}

int dm_trans_set(struct dm_trans *t, const char *name, const char *value)
{
	int idx = dm_param_index(name);
	if (idx < 0 || t->n >= DM_NPARAMS)
		return -1;
	t->set[t->n].idx = idx;
	snprintf(t->set[t->n].value, DM_VALUE_LEN, "%s", value);
	t->n++;
	return 0;
}

void dm_trans_clean(struct dm_trans *t)
{
	work_us(COST_DM_CLEAN_US);
	t->n = 0;
}

/* Applies a transaction: validate every action, write, then notify per changed param.
 * The real-world counterpart (ambiorix trans apply) dominates the seed's profile. */
NOINLINE int dm_finalize_transaction(struct dm_trans *t)
{
	if (!t->obj)
		return -1;
	work_us(COST_DM_FINALIZE_US);
	for (int i = 0; i < t->n; i++)
		memcpy(t->obj->p[t->set[i].idx].value, t->set[i].value, DM_VALUE_LEN);
	dm_txn_count++;
	t->n = 0;
	return 0;
}

/* Reads an object back as key/value pairs (what a reply builder marshals). */
NOINLINE int dm_get_object_params(const struct dm_object *o, struct dm_kv *out, int max)
{
	int n = max < DM_NPARAMS ? max : DM_NPARAMS;
	work_us(COST_DM_READBACK_US);
	for (int i = 0; i < n; i++) {
		out[i].key = dm_param_names[i];
		memcpy(out[i].value, o->p[i].value, DM_VALUE_LEN);
	}
	return n;
}
