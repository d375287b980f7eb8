/* The generated tables (sim_data.h) and lookups over them; see catalog.h. */
#include "catalog.h"

#include <stdio.h>
#include <string.h>

#include "nvml_abi.h"
#include "sim_consts.h"

struct sim_error {
    int code;
    const char *name;
    const char *text;
};
struct sim_xid {
    unsigned code;
    const char *meaning;
};

#include "sim_data.h"

#define LENGTH(array) (sizeof(array) / sizeof((array)[0]))

const struct sim_model *catalog_model(const char *name)
{
    for (unsigned i = 0; i < LENGTH(MODELS); i++)
        if (strcmp(MODELS[i].alias, name) == 0)
            return &MODELS[i];
    for (unsigned i = 0; i < LENGTH(MODELS); i++)
        for (unsigned j = 0; j < MODELS[i].nvml_name_count; j++)
            if (strcmp(MODELS[i].nvml_names[j], name) == 0)
                return &MODELS[i];
    return NULL;
}

void catalog_aliases(char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < LENGTH(MODELS) && used < size; i++) {
        int n = snprintf(out + used, size - used, "%s%s", i ? ", " : "", MODELS[i].alias);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

const struct sim_profile *catalog_profile(const struct sim_model *model, unsigned id)
{
    for (unsigned i = 0; i < model->profile_count; i++)
        if (model->profiles[i].id == id)
            return &model->profiles[i];
    return NULL;
}

int catalog_ci_slices(unsigned constant, unsigned *slices)
{
    for (unsigned i = 0; i < LENGTH(CI_SLICES); i++)
        if (CI_SLICES[i][0] == constant) {
            *slices = CI_SLICES[i][1];
            return 1;
        }
    return 0;
}

const unsigned char *catalog_mig_uuid_namespace(void) { return MIG_UUID_NAMESPACE; }

const unsigned char *catalog_gpu_uuid_namespace(void) { return GPU_UUID_NAMESPACE; }

int catalog_error_code(const char *name, int *code)
{
    for (unsigned i = 0; i < LENGTH(ERRORS); i++)
        if (strcmp(ERRORS[i].name, name) == 0) {
            *code = ERRORS[i].code;
            return 1;
        }
    return 0;
}

const char *catalog_error_text(int code)
{
    for (unsigned i = 0; i < LENGTH(ERRORS); i++)
        if (ERRORS[i].code == code)
            return ERRORS[i].text;
    return NULL;
}

const char *catalog_xid_meaning(unsigned code)
{
    for (unsigned i = 0; i < LENGTH(XIDS); i++)
        if (XIDS[i].code == code)
            return XIDS[i].meaning;
    return XID_UNKNOWN_MEANING;
}

int catalog_faultable(const char *function)
{
    for (unsigned i = 0; i < LENGTH(FAULTABLE); i++)
        if (strcmp(FAULTABLE[i], function) == 0)
            return 1;
    return 0;
}
