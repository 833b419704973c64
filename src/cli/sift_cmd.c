/* sift_cmd.c — `flynn sift` and `flynn match` (being written) */
#include "sift_cmd.h"

#include <stdio.h>

int flynn_cmd_sift(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "flynn sift: not built yet\n"); return 2; }
int flynn_cmd_match(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "flynn match: not built yet\n"); return 2; }
