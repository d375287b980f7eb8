/* What the simulated driver knows without a state file: the GPU catalog and NVML's tables, as
 * build.py generates them into sim_data.h from gpuprov's catalog, pynvml and gpuprov's XID table.
 *
 *   const struct sim_model *a100 = catalog_model("A100-80GB");   // or "NVIDIA A100-SXM4-80GB"
 *   const char *text = catalog_error_text(NVML_ERROR_IN_USE);    // "In use by another client"
 */
#ifndef GPUPROV_CATALOG_H
#define GPUPROV_CATALOG_H

#include <stddef.h>

struct sim_placement {
    unsigned start, size;
};
struct sim_profile {
    const char *name;
    unsigned id, constant, compute_slices, max_instances;
    unsigned long long memory_mib;
    const struct sim_placement *placements;
    unsigned placement_count;
};
struct sim_model {
    const char *alias;
    const char *const *nvml_names;
    unsigned nvml_name_count;
    unsigned pci_device_id;
    unsigned long long memory_mib;
    unsigned memory_slots, compute_slices;
    const struct sim_profile *profiles;
    unsigned profile_count;
    unsigned cc_major, cc_minor;
    unsigned memory_repair; /* REPAIR_ROW_REMAPPING, REPAIR_PAGE_RETIREMENT or 0 */
};

/* A catalog model by alias, then by NVML product name (gpuprov.core.catalog.find_model); NULL. */
const struct sim_model *catalog_model(const char *name);
/* The aliases, comma-separated, for "known: ..." messages. */
void catalog_aliases(char *out, size_t size);
/* The GI profile of `model` with NVML profile id `id`, or NULL. */
const struct sim_profile *catalog_profile(const struct sim_model *model, unsigned id);
/* Compute slices of CI profile constant `constant` (NVML_COMPUTE_INSTANCE_PROFILE_*); 0: none. */
int catalog_ci_slices(unsigned constant, unsigned *slices);
const unsigned char *catalog_mig_uuid_namespace(void);
const unsigned char *catalog_gpu_uuid_namespace(void);
/* NVML_ERROR_* by name: 1 and the code when known. */
int catalog_error_code(const char *name, int *code);
/* nvmlErrorString's text for `code`, or NULL when NVML has none. */
const char *catalog_error_text(int code);
/* What XID `code` means (gpuprov.host.health.xid.meaning), for the kernel log line. */
const char *catalog_xid_meaning(unsigned code);
/* Whether `function` is one a fault can make fail: a function this library serves. */
int catalog_faultable(const char *function);

#endif
