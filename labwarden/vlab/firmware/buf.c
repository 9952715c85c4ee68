/* Growable byte buffer for RPC replies. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sta.h"

void sbuf_init(struct sbuf *b) { b->p = NULL; b->len = b->cap = 0; }
void sbuf_reset(struct sbuf *b) { b->len = 0; if (b->p) b->p[0] = 0; }
void sbuf_free(struct sbuf *b) { free(b->p); sbuf_init(b); }

static void sbuf_grow(struct sbuf *b, size_t need)
{
	if (b->len + need + 1 <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap < b->len + need + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		abort();
	b->p = p;
	b->cap = cap;
}

void sbuf_add(struct sbuf *b, const char *s, size_t n)
{
	sbuf_grow(b, n);
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

void sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	sbuf_grow(b, 256);
	va_start(ap, fmt);
	int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= b->cap - b->len) {
		sbuf_grow(b, n);
		va_start(ap, fmt);
		vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += n;
}
