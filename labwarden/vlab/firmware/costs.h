/* Per-station, per-poll costs in microseconds (burnt by work_us()). One place to tune the
 * lab's shape; see CONTRACT.md "Measured on the dev machine". The trace walk is not here:
 * it is real strcmp work whose cost follows the trace config. */
#ifndef STA_COSTS_H
#define STA_COSTS_H

#define COST_HAL_ROUNDTRIP_US   250.0 /* one netlink-like request/reply (x3 per station) */
#define COST_SYNCSTATS_US       300.0 /* volatile counters written straight to the object */
#define COST_SYNCINFO_BUILD_US  150.0 /* rebuilding ~40 static params into a transaction */
#define COST_DM_FINALIZE_US    1000.0 /* validate + apply + change events of one write txn */
#define COST_DM_READBACK_US     270.0 /* dm_get_object_params of one ~70-param object */
#define COST_MARSHAL_US         370.0 /* formatting the ~70 params into the full reply */
#define COST_BRIEF_US            20.0 /* 14 keys straight from live state (patch 0902) */
#define COST_DM_CLEAN_US          1.0 /* dropping an unapplied transaction */

#endif
