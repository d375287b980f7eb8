/* The simulated driver's "hardware" switches: what happens to a real GPU outside NVML (a host
 * built, booted or reset, a driver loaded, an XID raised, memory errors, a process holding the
 * GPU, an NVML call made to fail), exported by the simulated libnvidia-ml.so.1 beside NVML
 * itself. The gpuprov-sim and nvidia-smi programs call them; so can tests (ctypes).
 *
 * Every function takes the state file's path (NULL: $GPUPROV_NVML_SIM, else the lab's default)
 * and returns 0 on success or -1 with one line in gpuprovSimLastError() (this thread's), and
 * changes the file only under its lock, replacing it atomically.
 *
 *   if (gpuprovSimCreate(NULL, "A100-80GB", 2, "gpu-node-1", NULL, 1u << 0) != 0)
 *       fprintf(stderr, "%s\n", gpuprovSimLastError());
 *   gpuprovSimInjectXid(NULL, 0, 79, 0, "", GPUPROV_SIM_WHOLE_GPU, GPUPROV_SIM_WHOLE_GPU);
 */
#ifndef GPUPROV_SIM_H
#define GPUPROV_SIM_H

#define GPUPROV_SIM_API __attribute__((visibility("default")))
/* An XID of the whole GPU, not of one of its MIG instances (nvmlEventData_t's 0xFFFFFFFF). */
#define GPUPROV_SIM_WHOLE_GPU 0xFFFFFFFFu

GPUPROV_SIM_API const char *gpuprovSimLastError(void);
/* The state file `path` names: `path` itself, else $GPUPROV_NVML_SIM, else the lab's default. */
GPUPROV_SIM_API const char *gpuprovSimStatePath(const char *path);

/* A freshly booted host: `count` GPUs of catalog `model`, no instances, driver loaded at
 * `driver_version` (NULL: the default); GPU i booted with MIG on when bit i of `mig_at_boot` is
 * set. UUIDs and PCI bus ids follow from `seed` and the index alone (gpuprov_lab.sim.state). */
GPUPROV_SIM_API int gpuprovSimCreate(const char *path, const char *model, int count,
                                     const char *seed, const char *driver_version,
                                     unsigned long long mig_at_boot);
/* Whether `path` is a valid state file: 0, or -1 saying what is wrong. */
GPUPROV_SIM_API int gpuprovSimCheck(const char *path);
/* How many GPUs the host has, or -1. */
GPUPROV_SIM_API int gpuprovSimGpuCount(const char *path);
/* The driver's version (NULL: unchanged) and whether it is loaded (-1: unchanged). */
GPUPROV_SIM_API int gpuprovSimSetDriver(const char *path, const char *version, int loaded);
/* A reboot: pending MIG modes current, every instance gone, processes gone, an empty kernel log. */
GPUPROV_SIM_API int gpuprovSimBoot(const char *path);
/* `nvidia-smi -r` of GPU `gpu`: 0 when reset, 1 when refused (a client holds it: the reason in
 * gpuprovSimLastError()), -1 on error. */
GPUPROV_SIM_API int gpuprovSimResetGpu(const char *path, int gpu);
/* A process holds GPU `gpu` open (busy), or not. */
GPUPROV_SIM_API int gpuprovSimSetBusy(const char *path, int gpu, int busy);
/* systemd unit `unit` holds GPU `gpu` while it is active; NULL clears the list. */
GPUPROV_SIM_API int gpuprovSimHold(const char *path, int gpu, const char *unit);
/* NVML function `function` fails with `error` (NULL: NVML_ERROR_UNKNOWN) after `successes` more
 * successful calls, counted across processes; `function` NULL clears the fault. */
GPUPROV_SIM_API int gpuprovSimSetFault(const char *path, const char *function,
                                       unsigned long long successes, const char *error);
/* XID `xid` on GPU `gpu`: the driver's kernel log line (the simulated /dev/kmsg) and the NVML
 * event, delivered to every event set registered on that GPU. `gpu_instance` and
 * `compute_instance` attribute it to a MIG instance, or are GPUPROV_SIM_WHOLE_GPU. */
GPUPROV_SIM_API int gpuprovSimInjectXid(const char *path, int gpu, unsigned xid, long pid,
                                        const char *name, unsigned gpu_instance,
                                        unsigned compute_instance);
/* ECC error counts of one kind (`uncorrected` 1, corrected 0): `volatile_count` (NULL:
 * unchanged) also raises the aggregate to at least it; `aggregate` (NULL: unchanged) sets it.
 * A volatile count that grows raises NVML's single- or double-bit ECC event. */
GPUPROV_SIM_API int gpuprovSimSetEcc(const char *path, int gpu, int uncorrected,
                                     const unsigned long long *volatile_count,
                                     const unsigned long long *aggregate);
/* A row remapping waits for a reset (one more uncorrectable row; `failure`: a remapping also
 * failed); `clear`: nothing pending, no failure. */
GPUPROV_SIM_API int gpuprovSimRemapPending(const char *path, int gpu, int failure, int clear);
/* A page retired for a double-bit error (else for single-bit ones); `pending`: it waits for a
 * driver reload. */
GPUPROV_SIM_API int gpuprovSimRetirePage(const char *path, int gpu, int double_bit, int pending);

#endif
