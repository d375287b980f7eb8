/* gpuprov-sim: set up and steer a simulated host's GPUs (the lab's "hardware" switches), a thin
 * program over the gpuprovSim* API of the simulated libnvidia-ml.so.1 (gpuprov_sim.h). The
 * state file is --state PATH, else
 * $GPUPROV_NVML_SIM, else the lab default.
 *
 *   gpuprov-sim init --model A100-80GB --count 8 --seed gpu-node-1 [--mig 0 ...]
 *   gpuprov-sim driver --version 535.261.03 --unloaded     # nvmlInit now fails
 *   gpuprov-sim boot                                       # what a reboot does
 *   gpuprov-sim fault -i 0 --busy                          # a process holds GPU 0
 *   gpuprov-sim fault --fail-after nvmlDeviceCreateGpuInstanceWithPlacement 2
 *   gpuprov-sim inject xid 79 --gpu 0                      # kernel log line and NVML event
 *   gpuprov-sim set-ecc --gpu 0 --uncorrected 2            # ECC error counts
 *   gpuprov-sim remap-pending --gpu 0                      # a row waits for a reset
 *   gpuprov-sim retire-page --gpu 0 --double-bit --pending # page-retirement models
 *   gpuprov-sim show                                       # print the state
 *
 * Bad input is one message on stderr and exit code 2.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpuprov_sim.h"

#define MAX_ITEMS 64

static const char USAGE[] =
    "usage: gpuprov-sim [-h] [--state STATE]\n"
    "                   {init,driver,boot,fault,inject,set-ecc,remap-pending,retire-page,show} "
    "...\n";

static int usage_error(const char *message, const char *what)
{
    fputs(USAGE, stderr);
    fprintf(stderr, "gpuprov-sim: error: %s%s\n", message, what);
    return 2;
}

static int error(void)
{
    fprintf(stderr, "gpuprov-sim: error: %s\n", gpuprovSimLastError());
    return 2;
}

__attribute__((format(printf, 1, 2))) static int refuse(const char *format, ...)
{
    va_list args;
    fputs("gpuprov-sim: error: ", stderr);
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    return 2;
}

/* argparse's type=int: an optional sign and digits. */
static int integer(const char *text, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(text, &end, 10);
    return *text && *end == '\0' && errno == 0;
}

/* A count up to 2**64 - 1 (NVML's widest counter). */
static int count(const char *text, unsigned long long *out)
{
    char *end;
    if (*text < '0' || *text > '9')
        return 0;
    errno = 0;
    *out = strtoull(text, &end, 10);
    return *end == '\0' && errno == 0;
}

/* The options of one subcommand: `--name VALUE`, `--name=VALUE` and flags, as argparse reads. */
struct arguments {
    int argc;
    char **argv;
    int at;
    const char *name; /* the option being read */
};

static int next_option(struct arguments *a, const char **value, int takes_value)
{
    const char *arg = a->argv[a->at];
    const char *equals = strchr(arg, '=');
    if (equals && takes_value) {
        *value = equals + 1;
        return 1;
    }
    if (takes_value) {
        if (a->at + 1 >= a->argc)
            return 0;
        *value = a->argv[++a->at];
    }
    return 1;
}

/* Whether argv[at] is the option `long_name` (or `short_name`), with or without "=VALUE". */
static int is(const struct arguments *a, const char *long_name, const char *short_name)
{
    const char *arg = a->argv[a->at];
    size_t n = strcspn(arg, "=");
    return (strlen(long_name) == n && strncmp(arg, long_name, n) == 0) ||
           (short_name && strlen(short_name) == n && strncmp(arg, short_name, n) == 0);
}

#define VALUE(var)                                                                  \
    do {                                                                            \
        if (!next_option(&a, &(var), 1))                                            \
            return usage_error("expected one argument: ", a.argv[a.at]);            \
    } while (0)

static int gpu_option(const char *text, int *gpu)
{
    long long value;
    if (!integer(text, &value) || value < INT_MIN || value > INT_MAX)
        return 0;
    *gpu = (int)value;
    return 1;
}

static int init(const char *path, struct arguments a)
{
    const char *model = NULL, *count_text = "1", *seed = "gpuprov-sim", *version = NULL, *v;
    unsigned long long mig = 0;
    long long n;
    for (; a.at < a.argc; a.at++) {
        if (is(&a, "--model", NULL)) {
            VALUE(model);
        } else if (is(&a, "--count", NULL)) {
            VALUE(count_text);
        } else if (is(&a, "--seed", NULL)) {
            VALUE(seed);
        } else if (is(&a, "--driver-version", NULL)) {
            VALUE(version);
        } else if (is(&a, "--mig", NULL)) {
            VALUE(v);
            if (!integer(v, &n) || n < 0 || n > 63)
                return usage_error("argument --mig: a GPU index, not ", v);
            mig |= 1ULL << n;
        } else {
            return usage_error("unrecognized arguments: ", a.argv[a.at]);
        }
    }
    if (model == NULL)
        return usage_error("the following arguments are required: --model", "");
    if (!integer(count_text, &n) || n < INT_MIN || n > INT_MAX)
        return usage_error("argument --count: invalid int value: ", count_text);
    return gpuprovSimCreate(path, model, (int)n, seed, version, mig) ? error() : 0;
}

static int driver(const char *path, struct arguments a)
{
    const char *version = NULL;
    int loaded = -1;
    for (; a.at < a.argc; a.at++) {
        if (is(&a, "--version", NULL)) {
            VALUE(version);
        } else if (is(&a, "--loaded", NULL) || is(&a, "--unloaded", NULL)) {
            int wanted = is(&a, "--loaded", NULL);
            if (loaded >= 0 && loaded != wanted)
                return usage_error("argument --unloaded: not allowed with argument --loaded", "");
            loaded = wanted;
        } else {
            return usage_error("unrecognized arguments: ", a.argv[a.at]);
        }
    }
    return gpuprovSimSetDriver(path, version, loaded) ? error() : 0;
}

static int fault(const char *path, struct arguments a)
{
    const char *held[MAX_ITEMS], *function = NULL, *successes = NULL, *error_name = NULL, *v;
    int indices[MAX_ITEMS], index_count = 0, held_count = 0, busy = -1, clear_held = 0;
    int clear_fault = 0, gpus;
    unsigned long long budget = 0;
    for (; a.at < a.argc; a.at++) {
        if (is(&a, "--index", "-i")) {
            VALUE(v);
            if (index_count == MAX_ITEMS || !gpu_option(v, &indices[index_count++]))
                return usage_error("argument -i/--index: invalid int value: ", v);
        } else if (is(&a, "--busy", NULL) || is(&a, "--idle", NULL)) {
            int wanted = is(&a, "--busy", NULL);
            if (busy >= 0 && busy != wanted)
                return usage_error("argument --idle: not allowed with argument --busy", "");
            busy = wanted;
        } else if (is(&a, "--held-by", NULL)) {
            VALUE(v);
            if (held_count == MAX_ITEMS)
                return refuse("at most %d --held-by units", MAX_ITEMS);
            held[held_count++] = v;
        } else if (is(&a, "--clear-held-by", NULL)) {
            clear_held = 1;
        } else if (is(&a, "--fail-after", NULL)) {
            if (a.at + 2 >= a.argc)
                return usage_error("argument --fail-after: expected 2 arguments", "");
            function = a.argv[++a.at];
            successes = a.argv[++a.at];
        } else if (is(&a, "--error", NULL)) {
            VALUE(error_name);
        } else if (is(&a, "--clear-fail-after", NULL)) {
            clear_fault = 1;
        } else {
            return usage_error("unrecognized arguments: ", a.argv[a.at]);
        }
    }
    /* Everything is checked before anything changes, so a refused command changes nothing. */
    gpus = gpuprovSimGpuCount(path);
    if (gpus < 0)
        return error();
    for (int i = 0; i < index_count; i++)
        if (indices[i] < 0 || indices[i] >= gpus)
            return refuse("no GPU %d (the host has %d)", indices[i], gpus);
    if (function && !count(successes, &budget))
        return refuse("--fail-after N must be a count, not '%s'", successes);
    if (clear_fault && !function && gpuprovSimSetFault(path, NULL, 0, NULL))
        return error();
    if (function && gpuprovSimSetFault(path, function, budget,
                                       error_name ? error_name : "NVML_ERROR_UNKNOWN"))
        return error();
    for (int g = 0; g < gpus; g++) {
        int selected = index_count == 0;
        for (int i = 0; i < index_count; i++)
            selected |= indices[i] == g;
        if (!selected)
            continue;
        if ((busy >= 0 && gpuprovSimSetBusy(path, g, busy)) ||
            (clear_held && gpuprovSimHold(path, g, NULL)))
            return error();
        for (int h = 0; h < held_count; h++)
            if (gpuprovSimHold(path, g, held[h]))
                return error();
    }
    return 0;
}

static int inject(const char *path, struct arguments a)
{
    const char *gpu_text = NULL, *pid_text = "0", *name = "", *gi_text = NULL, *ci_text = NULL;
    long long code, pid, gi = GPUPROV_SIM_WHOLE_GPU, ci = GPUPROV_SIM_WHOLE_GPU;
    int gpu;
    if (a.at >= a.argc || strcmp(a.argv[a.at], "xid") != 0)
        return usage_error("argument event: invalid choice (choose from 'xid')", "");
    if (++a.at >= a.argc)
        return usage_error("the following arguments are required: code", "");
    if (!integer(a.argv[a.at], &code) || code < 0 || code > 65535)
        return usage_error("argument code: an XID code, not ", a.argv[a.at]);
    for (a.at++; a.at < a.argc; a.at++) {
        if (is(&a, "--gpu", NULL))
            VALUE(gpu_text);
        else if (is(&a, "--pid", NULL))
            VALUE(pid_text);
        else if (is(&a, "--name", NULL))
            VALUE(name);
        else if (is(&a, "--gpu-instance", NULL))
            VALUE(gi_text);
        else if (is(&a, "--compute-instance", NULL))
            VALUE(ci_text);
        else
            return usage_error("unrecognized arguments: ", a.argv[a.at]);
    }
    if (gpu_text == NULL)
        return usage_error("the following arguments are required: --gpu", "");
    if (!gpu_option(gpu_text, &gpu))
        return usage_error("argument --gpu: invalid int value: ", gpu_text);
    if (!integer(pid_text, &pid))
        return usage_error("argument --pid: invalid int value: ", pid_text);
    if ((gi_text && (!integer(gi_text, &gi) || gi < 0 || gi > 14)) ||
        (ci_text && (!integer(ci_text, &ci) || ci < 0 || ci > 7)) || (gi_text == NULL) != (ci_text == NULL))
        return refuse("--gpu-instance (0-14) and --compute-instance (0-7) go together");
    return gpuprovSimInjectXid(path, gpu, (unsigned)code, (long)pid, name, (unsigned)gi,
                               (unsigned)ci)
               ? error()
               : 0;
}

static int set_ecc(const char *path, struct arguments a)
{
    static const char *const OPTIONS[4] = {"--corrected", "--corrected-aggregate", "--uncorrected",
                                           "--uncorrected-aggregate"};
    const char *values[4] = {NULL, NULL, NULL, NULL}, *gpu_text = NULL;
    unsigned long long counts[4];
    int gpu;
    for (; a.at < a.argc; a.at++) {
        int known = 0;
        if (is(&a, "--gpu", NULL)) {
            VALUE(gpu_text);
            continue;
        }
        for (int k = 0; k < 4 && !known; k++)
            if (is(&a, OPTIONS[k], NULL)) {
                VALUE(values[k]);
                known = 1;
            }
        if (!known)
            return usage_error("unrecognized arguments: ", a.argv[a.at]);
    }
    if (gpu_text == NULL)
        return usage_error("the following arguments are required: --gpu", "");
    if (!gpu_option(gpu_text, &gpu))
        return usage_error("argument --gpu: invalid int value: ", gpu_text);
    for (int k = 0; k < 4; k++) {
        long long signed_value;
        if (values[k] && integer(values[k], &signed_value) && signed_value < 0)
            return refuse("%s counts cannot be negative", OPTIONS[k / 2 * 2]);
        if (values[k] && !count(values[k], &counts[k]))
            return refuse("%s must be a count of at most %llu, not '%s'", OPTIONS[k], ULLONG_MAX,
                          values[k]);
    }
    /* uncorrected first; with no count at all, still the GPU's check (and a health entry) */
    for (int kind = 1; kind >= 0; kind--)
        if ((values[2 * kind] || values[2 * kind + 1] || (kind == 1 && !values[0] && !values[1])) &&
            gpuprovSimSetEcc(path, gpu, kind, values[2 * kind] ? &counts[2 * kind] : NULL,
                             values[2 * kind + 1] ? &counts[2 * kind + 1] : NULL))
            return error();
    return 0;
}

/* The --gpu option and the flags among `names` (set in `on`) of remap-pending and retire-page. */
static int gpu_and_flags(struct arguments a, const char *const *names, int *on, int count,
                         int *gpu)
{
    const char *gpu_text = NULL;
    for (; a.at < a.argc; a.at++) {
        int known = 0;
        if (is(&a, "--gpu", NULL)) {
            VALUE(gpu_text);
            continue;
        }
        for (int k = 0; k < count && !known; k++)
            if (is(&a, names[k], NULL))
                known = on[k] = 1;
        if (!known)
            return usage_error("unrecognized arguments: ", a.argv[a.at]);
    }
    if (gpu_text == NULL)
        return usage_error("the following arguments are required: --gpu", "");
    if (!gpu_option(gpu_text, gpu))
        return usage_error("argument --gpu: invalid int value: ", gpu_text);
    return 0;
}

static int remap_pending(const char *path, struct arguments a)
{
    static const char *const NAMES[] = {"--failure", "--clear"};
    int on[2] = {0, 0}, gpu, code = gpu_and_flags(a, NAMES, on, 2, &gpu);
    if (code)
        return code;
    return gpuprovSimRemapPending(path, gpu, on[0], on[1]) ? error() : 0;
}

static int retire_page(const char *path, struct arguments a)
{
    static const char *const NAMES[] = {"--double-bit", "--pending"};
    int on[2] = {0, 0}, gpu, code = gpu_and_flags(a, NAMES, on, 2, &gpu);
    if (code)
        return code;
    return gpuprovSimRetirePage(path, gpu, on[0], on[1]) ? error() : 0;
}

static int show(const char *path)
{
    char buffer[8192];
    size_t n;
    FILE *f;
    if (gpuprovSimCheck(path))
        return error();
    path = gpuprovSimStatePath(path);
    f = fopen(path, "r");
    if (f == NULL)
        return refuse("%s: %s", path, strerror(errno));
    while ((n = fread(buffer, 1, sizeof(buffer), f)) > 0)
        fwrite(buffer, 1, n, stdout);
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *command;
    struct arguments a = {argc, argv, 1, NULL};
    for (; a.at < argc && argv[a.at][0] == '-'; a.at++) {
        if (strcmp(argv[a.at], "-h") == 0 || strcmp(argv[a.at], "--help") == 0) {
            fputs(USAGE, stdout);
            return 0;
        }
        if (!is(&a, "--state", NULL))
            return usage_error("unrecognized arguments: ", argv[a.at]);
        VALUE(path);
    }
    if (a.at >= argc)
        return usage_error("the following arguments are required: command", "");
    command = argv[a.at++];
    if (strcmp(command, "init") == 0)
        return init(path, a);
    if (strcmp(command, "driver") == 0)
        return driver(path, a);
    if (strcmp(command, "fault") == 0)
        return fault(path, a);
    if (strcmp(command, "inject") == 0)
        return inject(path, a);
    if (strcmp(command, "set-ecc") == 0)
        return set_ecc(path, a);
    if (strcmp(command, "remap-pending") == 0)
        return remap_pending(path, a);
    if (strcmp(command, "retire-page") == 0)
        return retire_page(path, a);
    if (a.at < argc)
        return usage_error("unrecognized arguments: ", argv[a.at]);
    if (strcmp(command, "boot") == 0)
        return gpuprovSimBoot(path) ? error() : 0;
    if (strcmp(command, "show") == 0)
        return show(path);
    return usage_error("argument command: invalid choice: ", command);
}
