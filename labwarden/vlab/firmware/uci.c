/* Tiny UCI reader: `config TYPE ['NAME']` and `option KEY 'VALUE'` lines, '#' comments.
 * Enough for the lab's four config files; unnamed sections get cfgNN names like uci does. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sta.h"

/* Copies the next word (quoted or bare) into out; returns pointer after it, or NULL. */
static char *uci_word(char *s, char *out, size_t max)
{
	size_t n = 0;
	while (isspace((unsigned char)*s))
		s++;
	if (!*s || *s == '#')
		return NULL;
	if (*s == '\'' || *s == '"') {
		char q = *s++;
		while (*s && *s != q)
			if (n + 1 < max)
				out[n++] = *s++;
			else
				s++;
		if (*s == q)
			s++;
	} else {
		while (*s && !isspace((unsigned char)*s))
			if (n + 1 < max)
				out[n++] = *s++;
			else
				s++;
	}
	out[n] = 0;
	return s;
}

int uci_load(const char *dir, const char *pkg, struct uci_pkg *out)
{
	char path[512], line[512], kw[16];
	snprintf(path, sizeof path, "%s/%s", dir, pkg);
	out->nsec = 0;
	out->sec = NULL;
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	struct uci_section *cur = NULL;
	while (fgets(line, sizeof line, f)) {
		char *s = uci_word(line, kw, sizeof kw);
		if (!s)
			continue;
		if (!strcmp(kw, "config")) {
			struct uci_section *ns = realloc(out->sec, (out->nsec + 1) * sizeof *ns);
			if (!ns)
				abort();
			out->sec = ns;
			cur = &ns[out->nsec];
			memset(cur, 0, sizeof *cur);
			s = uci_word(s, cur->type, sizeof cur->type);
			if (!s || !uci_word(s, cur->name, sizeof cur->name))
				snprintf(cur->name, sizeof cur->name, "cfg%02d", out->nsec);
			out->nsec++;
		} else if ((!strcmp(kw, "option") || !strcmp(kw, "list")) && cur &&
			   cur->nopt < (int)(sizeof cur->opt / sizeof cur->opt[0])) {
			struct uci_option *o = &cur->opt[cur->nopt];
			if ((s = uci_word(s, o->name, sizeof o->name)) && uci_word(s, o->value, sizeof o->value))
				cur->nopt++;
		}
	}
	fclose(f);
	return 0;
}

const char *uci_sec_get(const struct uci_section *s, const char *opt)
{
	for (int i = s->nopt - 1; i >= 0; i--) /* last one wins */
		if (!strcmp(s->opt[i].name, opt))
			return s->opt[i].value;
	return NULL;
}

const char *uci_get(const struct uci_pkg *p, const char *sec, const char *opt)
{
	for (int i = 0; i < p->nsec; i++)
		if (!strcmp(p->sec[i].name, sec))
			return uci_sec_get(&p->sec[i], opt);
	return NULL;
}

void uci_free(struct uci_pkg *p)
{
	free(p->sec);
	p->sec = NULL;
	p->nsec = 0;
}
