/* driver.c: the backend registry: maps a driver name ("afpacket", "sim", "udp") to its ops struct. */
#include <stddef.h>
#include <string.h>

#include "driver.h"

static const struct emp_driver_ops *const drivers[] = {
	&emp__afpacket_ops,
	&emp__sim_ops,
	&emp__udp_ops,
};

/* NULL or "" selects the default backend, afpacket; an unknown name gives NULL. */
const struct emp_driver_ops *emp__driver_find(const char *name)
{
	if (!name || !*name)
		return &emp__afpacket_ops;
	for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++)
		if (strcmp(drivers[i]->name, name) == 0)
			return drivers[i];
	return NULL;
}
