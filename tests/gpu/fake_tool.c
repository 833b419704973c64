/*
 * fake_tool.c — stands in for flynn and test_gpu_parity in a fake GPU
 * bundle, so that tests/gpu/test_run.sh can walk tests/gpu/run.sh's control
 * flow (exit status, report files, deadline) on a machine without a GPU.
 * Called as test_gpu_parity: sleeps $FAKE_PARITY_SLEEP seconds, exits
 * $FAKE_PARITY_RC (77 prints run.sh's SKIP line). Called as flynn: doctor
 * exits $FAKE_DOCTOR_RC; devices/bandwidth --json print the fields run.sh
 * reads (device-to-device $FAKE_D2D GB/s against a 4,800 GB/s peak); train
 * prints a throughput and an accuracy; everything else exits 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

int main(int argc, char **argv) {
    const char *self = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    if (strcmp(self, "test_gpu_parity") == 0) {
        sleep((unsigned)env_int("FAKE_PARITY_SLEEP", 0));
        int rc = env_int("FAKE_PARITY_RC", 0);
        if (rc == 77) printf("SKIP: no usable GPU: fake\n");
        else printf("test_gpu_parity: 10 checks, %d failed\n", rc ? 1 : 0);
        return rc;
    }
    const char *cmd = argc > 1 ? argv[1] : "";
    int json = argc > 2 && strcmp(argv[2], "--json") == 0;
    if (strcmp(cmd, "doctor") == 0) {
        int rc = env_int("FAKE_DOCTOR_RC", 0);
        printf("  1. driver         %s fake\n", rc ? "FAIL" : "PASS");
        return rc;
    }
    if (strcmp(cmd, "devices") == 0 && json) {
        printf("{\"devices\": [{\"peak_bandwidth_gbs\": 4800}]}\n");
        return env_int("FAKE_DOCTOR_RC", 0);
    }
    if (strcmp(cmd, "bandwidth") == 0 && json) {
        printf("{\"points\": [{\"device_to_device\": %d, \"host_to_device\": 50, \"device_to_host\": 50}]}\n",
               env_int("FAKE_D2D", 4000));
        return 0;
    }
    if (strcmp(cmd, "train") == 0) {
        printf("test accuracy: 0.8000 - test loss: 0.5000 (1000 test images)\n");
        printf("training throughput: 1000 samples/s (fake)\n");
        return 0;
    }
    return strcmp(cmd, "devices") == 0 ? env_int("FAKE_DOCTOR_RC", 0) : 0;
}
