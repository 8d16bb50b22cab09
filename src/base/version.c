/* Library version. */
#include "config.h"
#include "phalanx/phalanx.h"

const char *phx_version(int *abi_major, int *abi_minor)
{
    if (abi_major) *abi_major = PHX_ABI_VERSION_MAJOR;
    if (abi_minor) *abi_minor = PHX_ABI_VERSION_MINOR;
    return PACKAGE_VERSION;
}
