/*
 * devtools.h — the device commands of the `flynn` tool (devtools.c).
 */
#ifndef FLYNN_CLI_DEVTOOLS_H
#define FLYNN_CLI_DEVTOOLS_H

#include <flynn/flynn.h>

int flynn_cmd_devices(int argc, char **argv);
int flynn_cmd_bandwidth(int argc, char **argv);
int flynn_cmd_doctor(int argc, char **argv);

#endif
