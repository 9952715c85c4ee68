/* libsta's copy of the build fingerprint. */
#include "sta.h"
#include "version.h"

const char *sta_fw_version(void)
{
	return fw_git_tag + sizeof "labwarden-fw-git:" - 1;
}
