/* The event API's paths under AddressSanitizer and LeakSanitizer (tests/test_nvml_sim_programs.py):
 * a set created, registered on every GPU, waited on with nothing to deliver (TIMEOUT), an XID
 * raised through the admin API delivered with its fields, freed; then shut down. Exit 0 when every
 * answer is what NVML documents; the sanitizers fail the run on any leak or bad access.
 *
 *   cc nvml_events_check.c -I<sources> -L<built> -l:libnvidia-ml.so.1 && GPUPROV_NVML_SIM=... ./a.out
 */
#include <stdio.h>

#include "gpuprov_sim.h"
#include "nvml_abi.h"

#define EXPECT(what, call, wanted)                                                     \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != (wanted)) {                                                         \
            fprintf(stderr, "%s: %d, not %d (%s)\n", what, rc_, wanted, gpuprovSimLastError()); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

int main(void)
{
    nvmlEventSet_t set;
    nvmlEventData_t event;
    nvmlDevice_t device;
    unsigned count, index;
    EXPECT("init", nvmlInit_v2(), NVML_SUCCESS);
    EXPECT("count", nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    EXPECT("create", nvmlEventSetCreate(&set), NVML_SUCCESS);
    for (unsigned i = 0; i < count; i++) {
        EXPECT("handle", nvmlDeviceGetHandleByIndex_v2(i, &device), NVML_SUCCESS);
        EXPECT("register", nvmlDeviceRegisterEvents(device, nvmlEventTypeXidCriticalError, set),
               NVML_SUCCESS);
    }
    EXPECT("nothing yet", nvmlEventSetWait_v2(set, &event, 20), NVML_ERROR_TIMEOUT);
    EXPECT("inject", gpuprovSimInjectXid(NULL, (int)count - 1, 79, 0, "", GPUPROV_SIM_WHOLE_GPU,
                                         GPUPROV_SIM_WHOLE_GPU),
           0);
    EXPECT("delivered", nvmlEventSetWait_v2(set, &event, 5000), NVML_SUCCESS);
    EXPECT("its gpu", nvmlDeviceGetIndex(event.device, &index), NVML_SUCCESS);
    if (index != count - 1 || event.eventType != nvmlEventTypeXidCriticalError ||
        event.eventData != 79 || event.gpuInstanceId != NVML_INSTANCE_ID_NONE) {
        fprintf(stderr, "event: gpu %u type %llu data %llu\n", index, event.eventType,
                event.eventData);
        return 1;
    }
    EXPECT("free", nvmlEventSetFree(set), NVML_SUCCESS);
    EXPECT("shutdown", nvmlShutdown(), NVML_SUCCESS);
    return 0;
}
