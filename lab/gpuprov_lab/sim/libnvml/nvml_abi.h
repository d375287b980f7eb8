/* The part of NVML's C ABI this simulated driver speaks: return codes, constants, structs and the
 * prototypes its own programs call, laid out as nvml.h (and nvidia-ml-py, which mirrors it)
 * defines them. build.py checks the numbers against pynvml when it generates sim_data.h.
 *
 *   nvmlDevice_t device;
 *   if (nvmlInit_v2() == NVML_SUCCESS && nvmlDeviceGetHandleByIndex_v2(0, &device) == 0) ...
 */
#ifndef GPUPROV_NVML_ABI_H
#define GPUPROV_NVML_ABI_H

#include <stdint.h>

/* nvmlReturn_t (nvml.h). */
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1
#define NVML_GPU_INSTANCE_PROFILE_COUNT 18
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 9
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0

/* Event types (nvml.h "Event Types"): the ones this simulation raises. */
#define nvmlEventTypeSingleBitEccError 0x1ULL
#define nvmlEventTypeDoubleBitEccError 0x2ULL
#define nvmlEventTypeXidCriticalError 0x8ULL
/* nvmlEventData_t's instance ids when an event is not attributable to a GPU or compute
 * instance (nvml.h: "set to 0xFFFFFFFF otherwise"). */
#define NVML_INSTANCE_ID_NONE 0xFFFFFFFFu

/* Handles are opaque pointers (nvml.h: `typedef struct nvmlDevice_st *nvmlDevice_t`). */
typedef uintptr_t nvmlDevice_t;
typedef uintptr_t nvmlGpuInstance_t;
typedef uintptr_t nvmlComputeInstance_t;
typedef struct sim_event_set *nvmlEventSet_t;

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;
typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;
typedef struct {
    unsigned id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;
typedef struct {
    unsigned version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount,
        copyEngineCount, decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} nvmlGpuInstanceProfileInfo_v2_t;
typedef struct {
    unsigned start, size;
} nvmlGpuInstancePlacement_t;
typedef nvmlGpuInstancePlacement_t nvmlPlacement_t;
typedef struct {
    nvmlDevice_t device;
    unsigned id, profileId;
    nvmlPlacement_t placement;
} nvmlGpuInstanceInfo_t;
typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned id, profileId;
    nvmlPlacement_t placement;
} nvmlComputeInstanceInfo_t;
typedef struct {
    unsigned id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;
typedef struct {
    unsigned version, id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
        sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
    char name[96];
} nvmlComputeInstanceProfileInfo_v2_t;
typedef struct {
    unsigned multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
        sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;
/* nvmlEventSetWait_v2's event (nvml.h nvmlEventData_st since the MIG ids were added; nvidia-ml-py
 * c_nvmlEventData_t); nvmlEventSetWait writes only the first three fields, the older layout. */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlEventData_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
} nvmlEventData_v1_t;

/* What this library's programs call (the library defines every one). */
int nvmlInit_v2(void);
int nvmlShutdown(void);
const char *nvmlErrorString(int result);
int nvmlSystemGetDriverVersion(char *version, unsigned length);
int nvmlDeviceGetCount_v2(unsigned *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device);
int nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned length);
int nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned length);
int nvmlDeviceGetIndex(nvmlDevice_t device, unsigned *index);
int nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci);
int nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
int nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned *current, unsigned *pending);
int nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned mode, int *activation);
int nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned *count);
int nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned index, nvmlDevice_t *mig);
int nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned profile,
                                        nvmlGpuInstanceProfileInfo_t *info);
int nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned profile,
                                         nvmlGpuInstanceProfileInfo_v2_t *info);
int nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned id,
                                             nvmlGpuInstanceProfileInfo_v2_t *info);
int nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned id,
                                                  nvmlPlacement_t *placements, unsigned *count);
int nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned id, unsigned *count);
int nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned id, nvmlGpuInstance_t *instance);
int nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned id,
                                             const nvmlPlacement_t *placement,
                                             nvmlGpuInstance_t *instance);
int nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned id, nvmlGpuInstance_t *instances,
                              unsigned *count);
int nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned id, nvmlGpuInstance_t *instance);
int nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance, nvmlGpuInstanceInfo_t *info);
int nvmlGpuInstanceDestroy(nvmlGpuInstance_t instance);
int nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t instance, unsigned profile,
                                                  unsigned engine,
                                                  nvmlComputeInstanceProfileInfo_v2_t *info);
int nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t instance, unsigned profile,
                                         nvmlComputeInstance_t *out);
int nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t instance, unsigned profile,
                                       nvmlComputeInstance_t *instances, unsigned *count);
int nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t instance, nvmlComputeInstanceInfo_t *info);
int nvmlComputeInstanceDestroy(nvmlComputeInstance_t instance);
int nvmlEventSetCreate(nvmlEventSet_t *set);
int nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types);
int nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set);
int nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeout);
int nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_v1_t *data, unsigned timeout);
int nvmlEventSetFree(nvmlEventSet_t set);

#endif
