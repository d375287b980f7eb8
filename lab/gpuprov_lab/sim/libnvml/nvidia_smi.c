/* nvidia-smi of the simulated driver: the subset gpuprov, its tests and the lab use, as a thin
 * program over NVML (the simulated libnvidia-ml.so.1), as the real tool is. Only the GPU reset,
 * which NVML has no call for, goes to the driver directly (gpuprovSimResetGpu).
 *
 *   nvidia-smi -L
 *   nvidia-smi --query-gpu=index,uuid,mig.mode.current --format=csv,noheader
 *   nvidia-smi -i 0 -mig 1 && nvidia-smi -i 0 -r
 *   nvidia-smi mig -cgi 9:4,14 -C -i 0
 *   nvidia-smi mig -lgi | -lci | -lgip | -lgipp | -dci [-ci IDS] | -dgi [-gi IDS]
 *
 * Output follows the real tool's shapes, with the source for each (-L:
 * DataDog/datadog-agent#33120; -lgip: NVIDIA/mig-parted#97, #187; -lgipp: the NVIDIA H100 NVL
 * MIG blog; -lgi: NVIDIA/DCGM#138; -lci, -dci, -dgi: NVIDIA/go-nvml#146; -cgi, -cci:
 * rapidsai/dask-cuda#583; -mig: NVIDIA/gpu-operator#118; -r: NVIDIA/NVSentinel#1690,
 * NVIDIA/mig-parted#181). Exit codes follow nvidia-smi(1) RETURN VALUE: 2 bad argument, 3 not
 * supported, 4 no permission, 6 not found, 9 driver not loaded, 12 no NVML, 255 other.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuprov_sim.h"
#include "nvml_abi.h"

enum { EXIT_OK = 0, EXIT_ARGUMENT = 2, EXIT_NOT_SUPPORTED = 3, EXIT_PERMISSION = 4,
       EXIT_NOT_FOUND = 6, EXIT_DRIVER = 9, EXIT_LIBRARY = 12, EXIT_OTHER = 255 };

#define MAX_LIST 64
#define TEXT 96

static const char USAGE[] =
    "usage: nvidia-smi [-h] [-i ID] (-L | --query-gpu FIELDS | -mig {0,1} | -r) [--format F]\n"
    "       nvidia-smi mig [-h] [-i ID] [-gi IDS] [-ci IDS] [-C] (-lgip | -lgipp | -lgi | -lci |\n"
    "                  -cgi PROFILES | -cci [PROFILES] | -dci | -dgi)\n";

static const char IN_USE_HINT[] =
    "currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
    "application, graphics application such as an X server, or a monitoring application such "
    "as another instance of nvidia-smi). Please first kill all processes using %s and all "
    "compute applications running in the system.\n";

enum command {
    NONE, LIST_GPUS, QUERY_GPU, SET_MIG_MODE, RESET, LIST_PROFILES, LIST_PLACEMENTS,
    LIST_GPU_INSTANCES, LIST_COMPUTE_INSTANCES, CREATE_GPU_INSTANCES, CREATE_COMPUTE_INSTANCES,
    DESTROY_COMPUTE_INSTANCES, DESTROY_GPU_INSTANCES,
};

struct options {
    enum command command;
    const char *command_option; /* the option that chose it, for "not allowed with" */
    const char *id, *gpu_instances, *compute_instances, *query, *format, *value;
    int default_compute_instance;
};

/* -- the command line (argparse's rules) -------------------------------------------------- */

static int usage_error(const char *format, const char *a, const char *b)
{
    fputs(USAGE, stderr);
    fputs("nvidia-smi: error: ", stderr);
    fprintf(stderr, format, a, b);
    fputc('\n', stderr);
    return EXIT_ARGUMENT;
}

struct option {
    const char *short_name, *long_name;
    enum command command; /* NONE: a modifier */
    int takes;            /* 0: a flag, 1: a value, 2: an optional value */
    int mig;              /* an option of `nvidia-smi mig` */
};

static const struct option OPTIONS[] = {
    {"-i", "--id", NONE, 1, 2},
    {"-L", "--list-gpus", LIST_GPUS, 0, 0},
    {NULL, "--query-gpu", QUERY_GPU, 1, 0},
    {"-mig", "--multi-instance-gpu", SET_MIG_MODE, 1, 0},
    {"-r", "--gpu-reset", RESET, 0, 0},
    {NULL, "--format", NONE, 1, 0},
    {"-gi", "--gpu-instance-id", NONE, 1, 1},
    {"-ci", "--compute-instance-id", NONE, 1, 1},
    {"-C", "--default-compute-instance", NONE, 0, 1},
    {"-lgip", "--list-gpu-instance-profiles", LIST_PROFILES, 0, 1},
    {"-lgipp", "--list-gpu-instance-possible-placements", LIST_PLACEMENTS, 0, 1},
    {"-lgi", "--list-gpu-instances", LIST_GPU_INSTANCES, 0, 1},
    {"-lci", "--list-compute-instances", LIST_COMPUTE_INSTANCES, 0, 1},
    {"-cgi", "--create-gpu-instance", CREATE_GPU_INSTANCES, 1, 1},
    {"-cci", "--create-compute-instance", CREATE_COMPUTE_INSTANCES, 2, 1},
    {"-dci", "--destroy-compute-instance", DESTROY_COMPUTE_INSTANCES, 0, 1},
    {"-dgi", "--destroy-gpu-instance", DESTROY_GPU_INSTANCES, 0, 1},
};

static int parse(int argc, char **argv, struct options *o)
{
    int mig = argc > 1 && strcmp(argv[1], "mig") == 0;
    char name[64];
    for (int i = 1 + mig; i < argc; i++) {
        const char *arg = argv[i], *equals = strchr(arg, '='), *value = NULL;
        const struct option *found = NULL;
        size_t n = equals ? (size_t)(equals - arg) : strlen(arg);
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(USAGE, stdout);
            exit(EXIT_OK);
        }
        for (unsigned k = 0; k < sizeof(OPTIONS) / sizeof(OPTIONS[0]) && !found; k++) {
            const struct option *opt = &OPTIONS[k];
            if (opt->mig != 2 && opt->mig != mig)
                continue;
            if ((opt->short_name && strlen(opt->short_name) == n &&
                 strncmp(arg, opt->short_name, n) == 0) ||
                (strlen(opt->long_name) == n && strncmp(arg, opt->long_name, n) == 0))
                found = opt;
        }
        snprintf(name, sizeof(name), "%.*s", (int)n, arg);
        if (found == NULL)
            return usage_error("unrecognized arguments: %s%s", arg, "");
        if (equals && found->takes == 0)
            return usage_error("argument %s: ignored explicit argument '%s'", name, equals + 1);
        if (equals)
            value = equals + 1;
        else if (found->takes == 1 && i + 1 < argc)
            value = argv[++i];
        else if (found->takes == 2 && i + 1 < argc && argv[i + 1][0] != '-')
            value = argv[++i];
        else if (found->takes == 1)
            return usage_error("argument %s: expected one argument%s", name, "");
        if (found->command != NONE) {
            if (o->command != NONE && o->command != found->command)
                return usage_error("argument %s: not allowed with argument %s", name,
                                   o->command_option);
            o->command = found->command;
            o->command_option = found->long_name;
            o->value = value ? value : "";
        } else if (strcmp(found->long_name, "--id") == 0) {
            o->id = value;
        } else if (strcmp(found->long_name, "--format") == 0) {
            o->format = value;
        } else if (strcmp(found->long_name, "--gpu-instance-id") == 0) {
            o->gpu_instances = value;
        } else if (strcmp(found->long_name, "--compute-instance-id") == 0) {
            o->compute_instances = value;
        } else {
            o->default_compute_instance = 1;
        }
    }
    if (o->command == NONE)
        return usage_error(mig ? "one of the arguments -lgip -lgipp -lgi -lci -cgi -cci -dci "
                                 "-dgi is required%s%s"
                               : "one of the arguments -L/--list-gpus --query-gpu -mig/"
                                 "--multi-instance-gpu -r/--gpu-reset is required%s%s",
                           "", "");
    if (o->command == SET_MIG_MODE && strcmp(o->value, "0") != 0 && strcmp(o->value, "1") != 0)
        return usage_error("argument -mig/--multi-instance-gpu: invalid choice: '%s' (choose "
                           "from '0', '1')%s",
                           o->value, "");
    if (o->command == QUERY_GPU)
        o->query = o->value;
    return EXIT_OK;
}

/* -- helpers -------------------------------------------------------------------------------- */

static int exit_code(int rc)
{
    switch (rc) {
    case NVML_ERROR_INVALID_ARGUMENT:
        return EXIT_ARGUMENT;
    case NVML_ERROR_NOT_SUPPORTED:
        return EXIT_NOT_SUPPORTED;
    case NVML_ERROR_NO_PERMISSION:
        return EXIT_PERMISSION;
    case NVML_ERROR_NOT_FOUND:
        return EXIT_NOT_FOUND;
    default:
        return EXIT_OTHER;
    }
}

/* An NVML error the command does not handle itself ends it. */
static int failed(int rc)
{
    printf("Failed to complete the command: %s\n", nvmlErrorString(rc));
    return exit_code(rc);
}

#define TRY(call)                       \
    do {                                \
        int rc_ = (call);               \
        if (rc_ != NVML_SUCCESS)        \
            return failed(rc_);         \
    } while (0)

/* Stop with `message` on stdout and exit code `code`. */
static int stop(int code, const char *message)
{
    printf("%s\n", message);
    return code;
}

/* A comma-separated list of integers, as int() reads each; -1 when one is not a number. */
static int numbers(const char *text, int *out, int most)
{
    int n = 0;
    const char *at = text;
    for (;;) {
        char *end;
        long value;
        errno = 0;
        value = strtol(at, &end, 10);
        while (isspace((unsigned char)*end))
            end++;
        if (end == at || errno || value < -1000000 || value > 1000000 || n == most ||
            (*end != ',' && *end != '\0'))
            return -1;
        out[n++] = (int)value;
        if (*end == '\0')
            return n;
        at = end + 1;
    }
}

static int parse_numbers(const char *text, const char *what, int *out, int *count)
{
    char message[256];
    *count = numbers(text, out, MAX_LIST);
    if (*count >= 0)
        return EXIT_OK;
    snprintf(message, sizeof(message), "Invalid %s list: '%s'", what, text);
    return stop(EXIT_ARGUMENT, message);
}

struct device {
    int index;
    nvmlDevice_t handle;
};

/* The GPUs `-i` selects, all GPUs without it. */
static int devices(const struct options *o, struct device *out, int *count)
{
    unsigned total;
    int wanted[MAX_LIST], n, code;
    TRY(nvmlDeviceGetCount_v2(&total));
    if (o->id) {
        code = parse_numbers(o->id, "GPU index", wanted, &n);
        if (code)
            return code;
    } else {
        for (n = 0; n < (int)total && n < MAX_LIST; n++)
            wanted[n] = n;
    }
    for (int i = 0; i < n; i++)
        if (wanted[i] < 0 || wanted[i] >= (int)total)
            return stop(EXIT_NOT_FOUND, "No devices were found");
    for (int i = 0; i < n; i++) {
        out[i].index = wanted[i];
        TRY(nvmlDeviceGetHandleByIndex_v2((unsigned)wanted[i], &out[i].handle));
    }
    *count = n;
    return EXIT_OK;
}

/* The MIG mode (current, pending); NOT_SUPPORTED is a GPU without MIG (*known 0). */
static int mig_mode(nvmlDevice_t device, int *known, unsigned *current, unsigned *pending)
{
    int rc = nvmlDeviceGetMigMode(device, current, pending);
    *known = rc == NVML_SUCCESS;
    return rc == NVML_ERROR_NOT_SUPPORTED ? NVML_SUCCESS : rc;
}

/* The selected GPUs whose MIG mode is currently enabled. */
static int mig_devices(const struct options *o, struct device *out, int *count)
{
    struct device all[MAX_LIST];
    int n, code = devices(o, all, &n);
    *count = 0;
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        unsigned current, pending;
        int known;
        TRY(mig_mode(all[i].handle, &known, &current, &pending));
        if (known && current)
            out[(*count)++] = all[i];
    }
    if (*count == 0)
        return stop(EXIT_NOT_FOUND, "No MIG-enabled devices found.");
    return EXIT_OK;
}

static int bus_id(nvmlDevice_t device, char *out)
{
    nvmlPciInfo_t pci;
    int rc = nvmlDeviceGetPciInfo_v3(device, &pci);
    if (rc == NVML_SUCCESS)
        snprintf(out, 32, "%s", pci.busId);
    return rc;
}

/* -- GPUs ----------------------------------------------------------------------------------- */

static int list_gpus(const struct options *o)
{
    struct device d[MAX_LIST];
    int n, code = devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        char name[TEXT], uuid[TEXT];
        unsigned current, pending, slots;
        int known;
        TRY(nvmlDeviceGetName(d[i].handle, name, TEXT));
        TRY(nvmlDeviceGetUUID(d[i].handle, uuid, TEXT));
        printf("GPU %d: %s (UUID: %s)\n", d[i].index, name, uuid);
        TRY(mig_mode(d[i].handle, &known, &current, &pending));
        if (!known || !current)
            continue;
        TRY(nvmlDeviceGetMaxMigDeviceCount(d[i].handle, &slots));
        for (unsigned position = 0; position < slots; position++) {
            nvmlDevice_t mig;
            char mig_name[TEXT], mig_uuid[TEXT];
            size_t prefix = strlen(name);
            int rc = nvmlDeviceGetMigDeviceHandleByIndex(d[i].handle, position, &mig);
            if (rc == NVML_ERROR_NOT_FOUND)
                break;
            TRY(rc);
            TRY(nvmlDeviceGetName(mig, mig_name, TEXT));
            TRY(nvmlDeviceGetUUID(mig, mig_uuid, TEXT));
            if (strncmp(mig_name, name, prefix) == 0 && mig_name[prefix] == ' ')
                memmove(mig_name, mig_name + prefix + 1, strlen(mig_name + prefix + 1) + 1);
            printf("  %-16sDevice %2u: (UUID: %s)\n", mig_name, position, mig_uuid);
        }
    }
    return EXIT_OK;
}

static const char *const FIELDS[] = {
    "index", "name", "uuid", "driver_version", "memory.total", "mig.mode.current",
    "mig.mode.pending", "pci.bus_id",
};

static int field_value(int field, const struct device *d, char *out, const char **unit)
{
    nvmlMemory_t memory;
    unsigned mode[2];
    int known, rc = NVML_SUCCESS;
    *unit = "";
    switch (field) {
    case 0:
        snprintf(out, TEXT, "%d", d->index);
        break;
    case 1:
        rc = nvmlDeviceGetName(d->handle, out, TEXT);
        break;
    case 2:
        rc = nvmlDeviceGetUUID(d->handle, out, TEXT);
        break;
    case 3:
        rc = nvmlSystemGetDriverVersion(out, TEXT);
        break;
    case 4:
        rc = nvmlDeviceGetMemoryInfo(d->handle, &memory);
        snprintf(out, TEXT, "%llu", memory.total >> 20);
        *unit = "MiB";
        break;
    case 5:
    case 6:
        rc = mig_mode(d->handle, &known, &mode[0], &mode[1]);
        snprintf(out, TEXT, "%s", !known ? "[N/A]" : mode[field - 5] ? "Enabled" : "Disabled");
        break;
    default:
        rc = bus_id(d->handle, out);
    }
    return rc;
}

static int query_gpu(const struct options *o)
{
    char fields_text[1024], format_text[256], message[1200];
    int fields[32], field_count = 0, csv = 0, header = 1, units = 1, n, code;
    struct device d[MAX_LIST];
    snprintf(fields_text, sizeof(fields_text), "%s", o->query);
    for (char *item = strtok(fields_text, ","); item; item = strtok(NULL, ",")) {
        int found = -1;
        while (isspace((unsigned char)*item))
            item++;
        for (char *end = item + strlen(item); end > item && isspace((unsigned char)end[-1]);)
            *--end = '\0';
        for (unsigned f = 0; f < sizeof(FIELDS) / sizeof(FIELDS[0]); f++)
            if (strcmp(item, FIELDS[f]) == 0)
                found = (int)f;
        if (found < 0 || field_count == 32) {
            snprintf(message, sizeof(message), "Field \"%s\" is not a valid field to query.",
                     item);
            return stop(EXIT_ARGUMENT, message);
        }
        fields[field_count++] = found;
    }
    snprintf(format_text, sizeof(format_text), "%s", o->format ? o->format : "");
    for (char *item = strtok(format_text, ", "); item; item = strtok(NULL, ", ")) {
        if (strcmp(item, "csv") == 0)
            csv = 1;
        else if (strcmp(item, "noheader") == 0)
            header = 0;
        else if (strcmp(item, "nounits") == 0)
            units = 0;
        else
            csv = -1;
    }
    if (csv != 1 || field_count == 0)
        return stop(EXIT_ARGUMENT, "--query-gpu needs --format=csv[,noheader][,nounits]");
    if (header) {
        for (int f = 0; f < field_count; f++) {
            int memory = fields[f] == 4;
            printf("%s%s%s", f ? ", " : "", FIELDS[fields[f]], units && memory ? " [MiB]" : "");
        }
        printf("\n");
    }
    code = devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        for (int f = 0; f < field_count; f++) {
            char value[TEXT];
            const char *unit;
            TRY(field_value(fields[f], &d[i], value, &unit));
            printf("%s%s%s%s", f ? ", " : "", value, units && *unit ? " " : "", units ? unit : "");
        }
        printf("\n");
    }
    return EXIT_OK;
}

static int set_mig_mode(const struct options *o)
{
    int enable = strcmp(o->value, "1") == 0, n, code;
    const char *verb = enable ? "Enabled" : "Disabled", *state = enable ? "enable" : "disable";
    struct device d[MAX_LIST];
    code = devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        char bus[32];
        int status, rc;
        TRY(bus_id(d[i].handle, bus));
        rc = nvmlDeviceSetMigMode(d[i].handle, (unsigned)enable, &status);
        if (rc != NVML_SUCCESS) {
            printf("Unable to %s MIG Mode for GPU %s: %s\n", state, bus, nvmlErrorString(rc));
            code = exit_code(rc);
            continue;
        }
        printf("%s MIG Mode for GPU %s\n", verb, bus);
        if (status == NVML_ERROR_IN_USE)
            printf("Warning: MIG mode is in pending %s state for GPU %s:%s\n%s is currently being "
                   "used by one or more other processes (e.g. CUDA application or a monitoring "
                   "application such as another instance of nvidia-smi). Please first kill all "
                   "processes using the device and retry the command or reboot the system to "
                   "make MIG mode effective.\n",
                   state, bus, nvmlErrorString(status), bus);
        else if (status != NVML_SUCCESS)
            printf("Warning: MIG mode is in pending %s state for GPU %s:%s\nReset the GPU "
                   "(nvidia-smi -r) or reboot the system to make MIG mode effective.\n",
                   state, bus, nvmlErrorString(status));
    }
    printf("All done.\n");
    return code;
}

static int reset(const struct options *o)
{
    struct device d[MAX_LIST];
    char refused[MAX_LIST][160];
    int n, count = 0, code = devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        char bus[32];
        int result;
        TRY(bus_id(d[i].handle, bus));
        result = gpuprovSimResetGpu(NULL, d[i].index);
        if (result < 0)
            return stop(EXIT_OTHER, gpuprovSimLastError());
        if (result > 0)
            snprintf(refused[count++], sizeof(refused[0]), "  GPU %s: %s", bus,
                     gpuprovSimLastError());
        else
            printf("GPU %s was successfully reset.\n", bus);
    }
    if (count == 0)
        return EXIT_OK;
    printf("The following GPUs could not be reset:\n");
    for (int i = 0; i < count; i++)
        printf("%s\n", refused[i]);
    printf("\n%d %s ", count, count > 1 ? "devices are" : "device is");
    printf(IN_USE_HINT, count > 1 ? "these devices" : "this device");
    return EXIT_OTHER;
}

/* -- MIG profiles --------------------------------------------------------------------------- */

static int by_size(const void *a, const void *b)
{
    const nvmlGpuInstanceProfileInfo_v2_t *x = a, *y = b;
    if (x->sliceCount != y->sliceCount)
        return x->sliceCount < y->sliceCount ? -1 : 1;
    if (x->memorySizeMB != y->memorySizeMB)
        return x->memorySizeMB < y->memorySizeMB ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* NVML's answer for a profile this GPU or GI lacks (mig-parted skips both). */
static int absent(int rc) { return rc == NVML_ERROR_INVALID_ARGUMENT || rc == NVML_ERROR_NOT_SUPPORTED; }

/* The GI profiles of a GPU (the NVML_GPU_INSTANCE_PROFILE_* walk), in -lgip order. */
static int gi_profiles(nvmlDevice_t device, nvmlGpuInstanceProfileInfo_v2_t *out, int *count)
{
    *count = 0;
    for (unsigned constant = 0; constant < NVML_GPU_INSTANCE_PROFILE_COUNT; constant++) {
        nvmlGpuInstanceProfileInfo_v2_t *p = &out[*count];
        int rc;
        memset(p, 0, sizeof(*p));
        p->version = (unsigned)sizeof(*p) | 2u << 24;
        rc = nvmlDeviceGetGpuInstanceProfileInfoV(device, constant, p);
        if (rc == NVML_SUCCESS)
            (*count)++;
        else if (!absent(rc))
            return rc;
    }
    qsort(out, (size_t)*count, sizeof(*out), by_size);
    return NVML_SUCCESS;
}

static int profile_by_id(nvmlDevice_t device, unsigned id, nvmlGpuInstanceProfileInfo_v2_t *p)
{
    memset(p, 0, sizeof(*p));
    p->version = (unsigned)sizeof(*p) | 2u << 24;
    return nvmlDeviceGetGpuInstanceProfileInfoByIdV(device, id, p);
}

static void rule(int width)
{
    putchar('+');
    for (int i = 0; i < width - 2; i++)
        putchar('-');
    printf("+\n");
}

/* The table frame the real tool draws: title, headers, then rows each closed by a rule. */
static void table_head(const char *title, const char *const *headers, int header_count)
{
    int width = (int)strlen(headers[0]);
    rule(width);
    printf("| %-*s |\n", width - 4, title);
    for (int i = 0; i < header_count; i++)
        printf("%s\n", headers[i]);
    putchar('|');
    for (int i = 0; i < width - 2; i++)
        putchar('=');
    printf("|\n");
}

static int list_profiles(const struct options *o)
{
    static const char *const HEADERS[] = {
        "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                              Free/Total   GiB              CE    JPEG  OFA  |",
    };
    struct device d[MAX_LIST];
    nvmlGpuInstanceProfileInfo_v2_t profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
    static char rows[MAX_LIST * NVML_GPU_INSTANCE_PROFILE_COUNT][2][256];
    int n, count, row_count = 0, code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        TRY(gi_profiles(d[i].handle, profiles, &count));
        for (int k = 0; k < count; k++) {
            const nvmlGpuInstanceProfileInfo_v2_t *p = &profiles[k];
            unsigned free;
            char instances[32];
            TRY(nvmlDeviceGetGpuInstanceRemainingCapacity(d[i].handle, p->id, &free));
            snprintf(instances, sizeof(instances), "%u/%u", free, p->instanceCount);
            snprintf(rows[row_count][0], sizeof(rows[0][0]),
                     "|%4d  %-18s%2u%8s%8s%-11.2f%-2s%7u%6u%6u   |", d[i].index, p->name, p->id,
                     instances, "", (double)p->memorySizeMB / 1024, p->isP2pSupported ? "Yes" : "No",
                     p->multiprocessorCount, p->decoderCount, p->encoderCount);
            snprintf(rows[row_count][1], sizeof(rows[0][1]), "|%60s%2u%6u%6u   |", "",
                     p->copyEngineCount, p->jpegCount, p->ofaCount);
            row_count++;
        }
    }
    table_head("GPU instance profiles:", HEADERS, 2);
    for (int r = 0; r < row_count; r++) {
        printf("%s\n%s\n", rows[r][0], rows[r][1]);
        rule((int)strlen(HEADERS[0]));
    }
    return EXIT_OK;
}

static int placements(nvmlDevice_t device, unsigned id, nvmlPlacement_t *out, unsigned *count)
{
    int rc = nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, id, NULL, count);
    if (rc == NVML_SUCCESS && *count > 8)
        rc = NVML_ERROR_INSUFFICIENT_SIZE;
    return rc == NVML_SUCCESS ? nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, id, out, count)
                              : rc;
}

static int list_placements(const struct options *o)
{
    struct device d[MAX_LIST];
    nvmlGpuInstanceProfileInfo_v2_t profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
    int n, count, code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        TRY(gi_profiles(d[i].handle, profiles, &count));
        for (int k = 0; k < count; k++) {
            nvmlPlacement_t where[8];
            unsigned places;
            TRY(placements(d[i].handle, profiles[k].id, where, &places));
            if (places == 0)
                continue;
            printf("GPU %2d Profile ID %2u Placement%s: {", d[i].index, profiles[k].id,
                   places > 1 ? "s" : " ");
            for (unsigned p = 0; p < places; p++)
                printf("%s%u", p ? "," : "", where[p].start);
            printf("}:%u\n", where[0].size);
        }
    }
    return EXIT_OK;
}

/* -- GPU instances -------------------------------------------------------------------------- */

struct gpu_instance {
    nvmlGpuInstance_t handle;
    nvmlGpuInstanceInfo_t info;
};

static int by_gi_id(const void *a, const void *b)
{
    unsigned x = ((const struct gpu_instance *)a)->info.id;
    unsigned y = ((const struct gpu_instance *)b)->info.id;
    return (x > y) - (x < y);
}

/* Every GI of a GPU, walking the GI profiles as mig-parted does, by id. */
static int gpu_instances(nvmlDevice_t device, struct gpu_instance *out, int *count)
{
    nvmlGpuInstanceProfileInfo_v2_t profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
    int n, rc = gi_profiles(device, profiles, &n);
    *count = 0;
    for (int k = 0; rc == NVML_SUCCESS && k < n; k++) {
        nvmlGpuInstance_t handles[8];
        unsigned found = profiles[k].instanceCount > 8 ? 8 : profiles[k].instanceCount;
        rc = nvmlDeviceGetGpuInstances(device, profiles[k].id, handles, &found);
        for (unsigned g = 0; rc == NVML_SUCCESS && g < found && *count < 8; g++) {
            out[*count].handle = handles[g];
            rc = nvmlGpuInstanceGetInfo(handles[g], &out[*count].info);
            (*count)++;
        }
    }
    qsort(out, (size_t)*count, sizeof(*out), by_gi_id);
    return rc;
}

/* The GIs `-gi` names on one GPU, all of them without `-gi`. */
static int selected_gpu_instances(const struct device *d, const struct options *o,
                                  struct gpu_instance *out, int *count)
{
    int wanted[MAX_LIST], n, code;
    if (o->gpu_instances == NULL) {
        TRY(gpu_instances(d->handle, out, count));
        return EXIT_OK;
    }
    code = parse_numbers(o->gpu_instances, "GPU instance id", wanted, &n);
    if (code)
        return code;
    *count = 0;
    for (int i = 0; i < n && *count < 8; i++) {
        char message[256];
        int rc = wanted[i] < 0 ? NVML_ERROR_INVALID_ARGUMENT
                               : nvmlDeviceGetGpuInstanceById(d->handle, (unsigned)wanted[i],
                                                              &out[*count].handle);
        if (rc != NVML_SUCCESS) {
            snprintf(message, sizeof(message), "Unable to find GPU instance ID %2d on GPU %2d: %s",
                     wanted[i], d->index, nvmlErrorString(rc));
            return stop(exit_code(rc), message);
        }
        TRY(nvmlGpuInstanceGetInfo(out[*count].handle, &out[*count].info));
        (*count)++;
    }
    return EXIT_OK;
}

static int list_gpu_instances(const struct options *o)
{
    static const char *const HEADERS[] = {
        "| GPU   Name             Profile  Instance   Placement  |",
        "|                          ID       ID       Start:Size |",
    };
    struct device d[MAX_LIST];
    static char rows[MAX_LIST * 8][256];
    int n, rows_count = 0, code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        struct gpu_instance gis[8];
        int count;
        code = selected_gpu_instances(&d[i], o, gis, &count);
        if (code)
            return code;
        for (int g = 0; g < count; g++) {
            nvmlGpuInstanceProfileInfo_v2_t p;
            char where[32];
            TRY(profile_by_id(d[i].handle, gis[g].info.profileId, &p));
            snprintf(where, sizeof(where), "%u:%u", gis[g].info.placement.start,
                     gis[g].info.placement.size);
            snprintf(rows[rows_count++], sizeof(rows[0]), "|%4d  %-18s%4u%9u%13s     |",
                     d[i].index, p.name, gis[g].info.profileId, gis[g].info.id, where);
        }
    }
    if (rows_count == 0)
        return stop(EXIT_NOT_FOUND, "No GPU instances found: Not Found");
    table_head("GPU instances:", HEADERS, 2);
    for (int r = 0; r < rows_count; r++) {
        printf("%s\n", rows[r]);
        rule((int)strlen(HEADERS[0]));
    }
    return EXIT_OK;
}

/* The GI profile a -cgi item names: an id, "3g.40gb" or "MIG 3g.40gb". */
static int profile_token(nvmlDevice_t device, const char *token,
                         nvmlGpuInstanceProfileInfo_v2_t *out)
{
    nvmlGpuInstanceProfileInfo_v2_t profiles[NVML_GPU_INSTANCE_PROFILE_COUNT];
    int n, rc, digits = *token != '\0';
    for (const char *c = token; *c; c++)
        digits &= isdigit((unsigned char)*c) != 0;
    if (digits)
        return strlen(token) > 9 ? NVML_ERROR_NOT_SUPPORTED
                                 : profile_by_id(device, (unsigned)atoi(token), out);
    rc = gi_profiles(device, profiles, &n);
    for (int k = 0; rc == NVML_SUCCESS && k < n; k++)
        if (strcmp(token, profiles[k].name) == 0 ||
            (strncmp(profiles[k].name, "MIG ", 4) == 0 && strcmp(token, profiles[k].name + 4) == 0)) {
            *out = profiles[k];
            return NVML_SUCCESS;
        }
    return rc == NVML_SUCCESS ? NVML_ERROR_NOT_SUPPORTED : rc;
}

/* A GI at slot `start`: the size is the profile's placement there (or its first one's). */
static int create_at(nvmlDevice_t device, unsigned id, unsigned start, nvmlGpuInstance_t *gi)
{
    nvmlPlacement_t where[8], wanted;
    unsigned count;
    int rc = placements(device, id, where, &count);
    if (rc != NVML_SUCCESS)
        return rc;
    if (count == 0)
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    wanted = (nvmlPlacement_t){start, where[0].size};
    for (unsigned p = 0; p < count; p++)
        if (where[p].start == start)
            wanted.size = where[p].size;
    return nvmlDeviceCreateGpuInstanceWithPlacement(device, id, &wanted, gi);
}

/* -- compute instances ---------------------------------------------------------------------- */

static int ci_profiles(nvmlGpuInstance_t gi, nvmlComputeInstanceProfileInfo_v2_t *out, int *count)
{
    *count = 0;
    for (unsigned constant = 0; constant < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; constant++) {
        nvmlComputeInstanceProfileInfo_v2_t *p = &out[*count];
        int rc;
        memset(p, 0, sizeof(*p));
        p->version = (unsigned)sizeof(*p) | 2u << 24;
        rc = nvmlGpuInstanceGetComputeInstanceProfileInfoV(
            gi, constant, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, p);
        if (rc == NVML_SUCCESS)
            (*count)++;
        else if (!absent(rc))
            return rc;
    }
    return NVML_SUCCESS;
}

/* One CI in `gi`: profile `profile`, or (-1) the one spanning the whole GI. */
static int create_ci(int index, nvmlGpuInstance_t gi, unsigned gi_id, int profile)
{
    nvmlComputeInstanceProfileInfo_v2_t profiles[NVML_COMPUTE_INSTANCE_PROFILE_COUNT];
    const nvmlComputeInstanceProfileInfo_v2_t *chosen = NULL;
    nvmlComputeInstance_t ci;
    nvmlComputeInstanceInfo_t info;
    int n, rc = ci_profiles(gi, profiles, &n);
    for (int k = 0; rc == NVML_SUCCESS && k < n; k++)
        if (profile < 0 ? chosen == NULL || profiles[k].sliceCount > chosen->sliceCount
                        : profiles[k].id == (unsigned)profile)
            chosen = &profiles[k];
    if (rc == NVML_SUCCESS && chosen == NULL)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        rc = nvmlGpuInstanceCreateComputeInstance(gi, chosen->id, &ci);
    if (rc != NVML_SUCCESS) {
        printf("Unable to create a compute instance on GPU %2d GPU instance ID %2u: %s\n"
               "Failed to create compute instances: %s\n",
               index, gi_id, nvmlErrorString(rc), nvmlErrorString(rc));
        return exit_code(rc);
    }
    TRY(nvmlComputeInstanceGetInfo_v2(ci, &info));
    printf("Successfully created compute instance ID %2u on GPU %2d GPU instance ID %2u using "
           "profile %s (ID %2u)\n",
           info.id, index, gi_id, chosen->name, chosen->id);
    return EXIT_OK;
}

static int create_gpu_instances(const struct options *o)
{
    struct device d[MAX_LIST];
    int n, code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        char items[1024];
        snprintf(items, sizeof(items), "%s", o->value);
        for (char *save, *item = strtok_r(items, ",", &save); item;
             item = strtok_r(NULL, ",", &save)) {
            nvmlGpuInstanceProfileInfo_v2_t profile;
            nvmlGpuInstance_t gi;
            nvmlGpuInstanceInfo_t info;
            char *start, *end;
            int rc;
            while (isspace((unsigned char)*item))
                item++;
            for (end = item + strlen(item); end > item && isspace((unsigned char)end[-1]);)
                *--end = '\0';
            start = strchr(item, ':');
            if (start)
                *start++ = '\0';
            rc = profile_token(d[i].handle, item, &profile);
            if (rc == NVML_SUCCESS && start) {
                long slot = strtol(start, &end, 10);
                rc = *start == '\0' || *end != '\0' || slot < 0 || slot > 64
                         ? NVML_ERROR_INVALID_ARGUMENT
                         : create_at(d[i].handle, profile.id, (unsigned)slot, &gi);
            } else if (rc == NVML_SUCCESS) {
                rc = nvmlDeviceCreateGpuInstance(d[i].handle, profile.id, &gi);
            }
            if (rc != NVML_SUCCESS) {
                printf("Unable to create a GPU instance on GPU %2d using profile %s%s%s: %s\n"
                       "Failed to create GPU instances: %s\n",
                       d[i].index, item, start ? ":" : "", start ? start : "",
                       nvmlErrorString(rc), nvmlErrorString(rc));
                return exit_code(rc);
            }
            TRY(nvmlGpuInstanceGetInfo(gi, &info));
            printf("Successfully created GPU instance ID %2u on GPU %2d using profile %s (ID %2u)\n",
                   info.id, d[i].index, profile.name, profile.id);
            if (o->default_compute_instance) {
                code = create_ci(d[i].index, gi, info.id, -1);
                if (code)
                    return code;
            }
        }
    }
    return EXIT_OK;
}

static int create_compute_instances(const struct options *o)
{
    struct device d[MAX_LIST];
    int wanted[MAX_LIST], wanted_count = 0, n, code;
    if (*o->value) {
        code = parse_numbers(o->value, "compute instance profile", wanted, &wanted_count);
        if (code)
            return code;
    }
    code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        struct gpu_instance gis[8];
        int count;
        code = selected_gpu_instances(&d[i], o, gis, &count);
        if (code)
            return code;
        for (int g = 0; g < count; g++)
            for (int k = 0; k < (wanted_count ? wanted_count : 1); k++) {
                int profile = wanted_count ? wanted[k] : -1;
                if (wanted_count && profile < 0)
                    profile = NVML_COMPUTE_INSTANCE_PROFILE_COUNT; /* no such profile */
                code = create_ci(d[i].index, gis[g].handle, gis[g].info.id, profile);
                if (code)
                    return code;
            }
    }
    return EXIT_OK;
}

struct compute_instance {
    nvmlComputeInstance_t handle;
    nvmlComputeInstanceInfo_t info;
    nvmlComputeInstanceProfileInfo_v2_t profile;
};

static int by_ci_id(const void *a, const void *b)
{
    unsigned x = ((const struct compute_instance *)a)->info.id;
    unsigned y = ((const struct compute_instance *)b)->info.id;
    return (x > y) - (x < y);
}

/* Every CI of a GI with its profile, by CI id. */
static int compute_instances(nvmlGpuInstance_t gi, struct compute_instance *out, int *count)
{
    nvmlComputeInstanceProfileInfo_v2_t profiles[NVML_COMPUTE_INSTANCE_PROFILE_COUNT];
    int n, rc = ci_profiles(gi, profiles, &n);
    *count = 0;
    for (int k = 0; rc == NVML_SUCCESS && k < n; k++) {
        nvmlComputeInstance_t handles[8];
        unsigned found = profiles[k].instanceCount > 8 ? 8 : profiles[k].instanceCount;
        rc = nvmlGpuInstanceGetComputeInstances(gi, profiles[k].id, handles, &found);
        for (unsigned c = 0; rc == NVML_SUCCESS && c < found && *count < 8; c++) {
            out[*count].handle = handles[c];
            out[*count].profile = profiles[k];
            rc = nvmlComputeInstanceGetInfo_v2(handles[c], &out[*count].info);
            (*count)++;
        }
    }
    qsort(out, (size_t)*count, sizeof(*out), by_ci_id);
    return rc;
}

static int list_compute_instances(const struct options *o)
{
    static const char *const HEADERS[] = {
        "| GPU     GPU       Name             Profile   Instance   Placement  |",
        "|       Instance                       ID        ID       Start:Size |",
        "|         ID                                                         |",
    };
    struct device d[MAX_LIST];
    static char rows[MAX_LIST * 8][256];
    int n, rows_count = 0, code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        struct gpu_instance gis[8];
        int count;
        code = selected_gpu_instances(&d[i], o, gis, &count);
        if (code)
            return code;
        for (int g = 0; g < count; g++) {
            struct compute_instance cis[8];
            int ci_count;
            TRY(compute_instances(gis[g].handle, cis, &ci_count));
            for (int c = 0; c < ci_count && rows_count < MAX_LIST * 8; c++) {
                char where[32];
                snprintf(where, sizeof(where), "%u:%u", cis[c].info.placement.start,
                         cis[c].info.placement.size);
                snprintf(rows[rows_count++], sizeof(rows[0]), "|%4d%7u       %-19s%3u%10u%13s     |",
                         d[i].index, gis[g].info.id, cis[c].profile.name, cis[c].profile.id,
                         cis[c].info.id, where);
            }
        }
    }
    if (rows_count == 0)
        return stop(EXIT_NOT_FOUND, "No compute instances found: Not Found");
    table_head("Compute instances:", HEADERS, 3);
    for (int r = 0; r < rows_count; r++) {
        printf("%s\n", rows[r]);
        rule((int)strlen(HEADERS[0]));
    }
    return EXIT_OK;
}

static int destroy_compute_instances(const struct options *o)
{
    struct device d[MAX_LIST];
    int wanted[MAX_LIST], wanted_count = -1, n, result = EXIT_OK, found = 0, code;
    if (o->compute_instances) {
        code = parse_numbers(o->compute_instances, "compute instance id", wanted, &wanted_count);
        if (code)
            return code;
    }
    code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        struct gpu_instance gis[8];
        int count;
        code = selected_gpu_instances(&d[i], o, gis, &count);
        if (code)
            return code;
        for (int g = 0; g < count; g++) {
            struct compute_instance cis[8];
            int ci_count, rc;
            TRY(compute_instances(gis[g].handle, cis, &ci_count));
            for (int c = 0; c < ci_count; c++) {
                int listed = wanted_count < 0;
                for (int w = 0; w < wanted_count; w++)
                    listed |= wanted[w] == (int)cis[c].info.id;
                if (!listed)
                    continue;
                found = 1;
                rc = nvmlComputeInstanceDestroy(cis[c].handle);
                if (rc != NVML_SUCCESS) {
                    printf("Unable to destroy compute instance ID %2u from GPU %2d GPU instance "
                           "ID %2u: %s\nFailed to destroy compute instances: %s\n",
                           cis[c].info.id, d[i].index, gis[g].info.id, nvmlErrorString(rc),
                           nvmlErrorString(rc));
                    result = exit_code(rc);
                    continue;
                }
                printf("Successfully destroyed compute instance ID %2u from GPU %2d GPU instance "
                       "ID %2u\n",
                       cis[c].info.id, d[i].index, gis[g].info.id);
            }
        }
    }
    if (!found)
        return stop(EXIT_NOT_FOUND, "No compute instances found: Not Found");
    return result;
}

static int destroy_gpu_instances(const struct options *o)
{
    struct device d[MAX_LIST];
    int n, result = EXIT_OK, found = 0, code = mig_devices(o, d, &n);
    if (code)
        return code;
    for (int i = 0; i < n; i++) {
        struct gpu_instance gis[8];
        int count;
        code = selected_gpu_instances(&d[i], o, gis, &count);
        if (code)
            return code;
        for (int g = 0; g < count; g++) {
            int rc = nvmlGpuInstanceDestroy(gis[g].handle);
            found = 1;
            if (rc != NVML_SUCCESS) {
                printf("Unable to destroy GPU instance ID %2u from GPU %2d: %s\n"
                       "Failed to destroy GPU instances: %s\n",
                       gis[g].info.id, d[i].index, nvmlErrorString(rc), nvmlErrorString(rc));
                result = exit_code(rc);
                continue;
            }
            printf("Successfully destroyed GPU instance ID %2u from GPU %2d\n", gis[g].info.id,
                   d[i].index);
        }
    }
    if (!found)
        return stop(EXIT_NOT_FOUND, "No GPU instances found: Not Found");
    return result;
}

/* -- main ----------------------------------------------------------------------------------- */

static int run(const struct options *o)
{
    switch (o->command) {
    case LIST_GPUS:
        return list_gpus(o);
    case QUERY_GPU:
        return query_gpu(o);
    case SET_MIG_MODE:
        return set_mig_mode(o);
    case RESET:
        return reset(o);
    case LIST_PROFILES:
        return list_profiles(o);
    case LIST_PLACEMENTS:
        return list_placements(o);
    case LIST_GPU_INSTANCES:
        return list_gpu_instances(o);
    case LIST_COMPUTE_INSTANCES:
        return list_compute_instances(o);
    case CREATE_GPU_INSTANCES:
        return create_gpu_instances(o);
    case CREATE_COMPUTE_INSTANCES:
        return create_compute_instances(o);
    case DESTROY_COMPUTE_INSTANCES:
        return destroy_compute_instances(o);
    default:
        return destroy_gpu_instances(o);
    }
}

int main(int argc, char **argv)
{
    struct options o = {0};
    int code = parse(argc, argv, &o), rc;
    if (code)
        return code;
    rc = nvmlInit_v2();
    if (rc == NVML_ERROR_LIBRARY_NOT_FOUND)
        return stop(EXIT_LIBRARY, "NVIDIA-SMI couldn't find libnvidia-ml.so library in your "
                                  "system. Please make sure that the NVIDIA Display Driver is "
                                  "properly installed and present in your system.");
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED)
        return stop(EXIT_DRIVER, "NVIDIA-SMI has failed because it couldn't communicate with the "
                                 "NVIDIA driver. Make sure that the latest NVIDIA driver is "
                                 "installed and running.");
    if (rc != NVML_SUCCESS) {
        printf("Failed to initialize NVML: %s\n", nvmlErrorString(rc));
        return exit_code(rc);
    }
    code = run(&o);
    nvmlShutdown();
    return code;
}
