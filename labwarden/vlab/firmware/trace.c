/* sahtrace-like trace zones. Every trace check looks its zone up by name: a linear walk over
 * all registered zones with a byte-wise compare (zone names share long prefixes, so each
 * compare runs deep). The HAL attribute zone is registered last, so its lookup walks them all.
 * Emitted lines go to an in-memory ring: the cost under study is the lookup, not the IO. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sta.h"

#define TRACE_MAX_ZONES 128
#define TRACE_RING_SIZE (64 * 1024)

static struct trace_zone zones[TRACE_MAX_ZONES];
static int nzones;
static char ring[TRACE_RING_SIZE];
static size_t ring_pos;
unsigned long trace_emitted;

NOINLINE int zone_strcmp(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

NOINLINE struct trace_zone *trace_get_zone(const char *name)
{
	for (int i = 0; i < nzones; i++)
		if (!zone_strcmp(zones[i].name, name))
			return &zones[i];
	for (int i = 0; i < nzones; i++) /* the "all" fallback */
		if (!zone_strcmp(zones[i].name, "all"))
			return &zones[i];
	return NULL;
}

int trace_register_zone(const char *name, int level)
{
	struct trace_zone *z = trace_get_zone(name);
	if (!z || strcmp(z->name, name)) {
		if (nzones >= TRACE_MAX_ZONES)
			return -1;
		z = &zones[nzones++];
		snprintf(z->name, sizeof z->name, "%s", name);
	}
	z->level = level;
	return 0;
}

int trace_set_zone_level(const char *name, int level)
{
	for (int i = 0; i < nzones; i++)
		if (!strcmp(zones[i].name, name)) {
			zones[i].level = level;
			return 0;
		}
	return -1;
}

/* Loads `config zone` sections (option name, option level) in file order. */
int trace_load_config(const char *dir)
{
	struct uci_pkg p;
	if (uci_load(dir, "trace", &p))
		return -1;
	for (int i = 0; i < p.nsec; i++) {
		const char *name = uci_sec_get(&p.sec[i], "name");
		const char *lvl = uci_sec_get(&p.sec[i], "level");
		if (!strcmp(p.sec[i].type, "zone") && name)
			trace_register_zone(name, lvl ? atoi(lvl) : TRACE_WARNING);
	}
	uci_free(&p);
	return 0;
}

static void ring_write(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		ring[ring_pos] = s[i];
		ring_pos = (ring_pos + 1) % TRACE_RING_SIZE;
	}
}

void trace_log(int lvl, const char *zone, const char *fmt, ...)
{
	struct trace_zone *z = trace_get_zone(zone);
	if (!z || lvl > z->level)
		return;
	char line[160];
	int n = snprintf(line, sizeof line, "[%s] ", z->name);
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof line - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	ring_write(line, n);
	trace_emitted++;
}
