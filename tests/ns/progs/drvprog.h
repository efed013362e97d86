/* drvprog.h: what the driver-level test programs (ringswitch.c, bulksplit.c) share: the clock, and the AF_PACKET driver opened from "NAME IFNAME ENDPOINT COUNT SECONDS". */
#ifndef EMP_DRVPROG_H
#define EMP_DRVPROG_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "afp_int.h"
#include "driver.h"
#include "proto.h"

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The driver on IFNAME for ENDPOINT (argv[1], argv[2]), or NULL after a
 * message with *status the exit status (2: usage, 1: the open failed). */
static void *drv_open(int argc, char **argv, const char *name, int *status)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s IFNAME ENDPOINT COUNT SECONDS\n", name);
		*status = 2;
		return NULL;
	}
	char err[256] = "";
	struct emp_dev_params p = { .ifname = argv[1], .ethertype = EMP_ETHERTYPE_DEFAULT,
				    .endpoint = (uint16_t)atoi(argv[2]), .err = err, .errlen = sizeof(err) };
	void *dev;
	if (emp__afpacket_ops.open(&p, &dev) < 0) {
		fprintf(stderr, "%s: open: %s\n", name, err);
		*status = 1;
		return NULL;
	}
	return dev;
}

#endif
