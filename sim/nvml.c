/* nvml.c — the virtual GPU's NVML stand-in, libnvidia-ml.so.1: the few management queries
 * PyTorch makes, answered for the virtual devices.
 *
 * PyTorch asks NVML whether a device sits on an NVLink fabric before it chooses the handle type
 * of its expandable segments (c10's get_fabric_access: nvmlInit_v2,
 * nvmlDeviceGetHandleByPciBusId_v2, nvmlDeviceGetGpuFabricInfoV) and calls the functions
 * without checking that NVML was found, so a machine without NVML crashes there. This stand-in
 * answers as a single-node machine does: a device whose profile reports fabric-handle support
 * (the Hopper profiles) has a fabric whose state is "completed", the others have none. PyTorch
 * then tries a fabric handle, which the virtual driver refuses as a GPU without an IMEX channel
 * does (CUDA_ERROR_NOT_PERMITTED), and falls back to POSIX file descriptors, as it does on such
 * a GPU.
 *
 * The devices are the virtual driver's (sim_device_count, cuDeviceGetAttribute, found with
 * dlsym in the process); handle i is device i, PCI bus id 0000:<i>:00.0 as cuDeviceGetPCIBusId
 * says. Per-process memory (nvmlDeviceGetComputeRunningProcesses, PyTorch's OOM message) and
 * NVLink queries return NVML_ERROR_NOT_SUPPORTED, counted and named once like everything the
 * virtual GPU does not model. No NVML header ships with the toolkit here: the types below are
 * NVML's documented layouts, declared locally.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};
enum {
    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0,
    NVML_GPU_FABRIC_STATE_COMPLETED = 3,
};

#define MAX_DEVICES 16
typedef struct nvml_device {
    int index;
} nvml_device;
typedef nvml_device *nvmlDevice_t;
static nvml_device devices[MAX_DEVICES] = {{0}, {1}, {2},  {3},  {4},  {5},  {6},  {7},
                                           {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

/* nvmlGpuFabricInfo_v2_t (v3 appends a byte): what get_fabric_access reads. */
typedef struct {
    unsigned int version; /* sizeof the struct | (struct version << 24) */
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
    unsigned int healthMask;
} nvml_fabric_info_v2;

static int initialized;

static int device_count(void)
{
    int (*count)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sim_device_count");
    int n = count ? count() : 0;
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

static nvmlReturn_t unsupported(const char *name)
{
    void (*note)(const char *, const char *) =
        (void (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "sim_unsupported_note");
    if (note)
        note(name, "NVML_ERROR_NOT_SUPPORTED");
    else
        fprintf(stderr, "gpumem sim: %s is not implemented by the NVML stand-in\n", name);
    return NVML_ERROR_NOT_SUPPORTED;
}

static nvml_device *device_of(nvmlDevice_t d)
{
    if (!initialized || d < devices || d >= devices + device_count()) return NULL;
    return d;
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    if (device_count() == 0) return NVML_ERROR_UNKNOWN; /* no virtual driver in the process */
    initialized++;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return nvmlInit_v2();
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized--;
    return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
    switch (r) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument Version Mismatch";
    default:
        return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v)
{
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    CUresult (*get)(int *) = (CUresult(*)(int *))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
    if (!get || get(v) != CUDA_SUCCESS) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned)device_count();
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!d || i >= (unsigned)device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &devices[i];
    return NVML_SUCCESS;
}

/* "domain:bus:device.function" in hex, as NVML and cuDeviceGetPCIBusId write it. */
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *d)
{
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    unsigned dom, bus, dev, fn;
    char end;
    if (!id || !d || sscanf(id, "%x:%x:%x.%x%c", &dom, &bus, &dev, &fn, &end) != 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dom != 0 || dev != 0 || fn != 0 || bus >= (unsigned)device_count())
        return NVML_ERROR_NOT_FOUND;
    *d = &devices[bus];
    return NVML_SUCCESS;
}

static int fabric_supported(int index)
{
    CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
        (CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(RTLD_DEFAULT,
                                                                "cuDeviceGetAttribute");
    int v = 0;
    if (!attr || attr(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, index)) return 0;
    return v;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t d, void *out)
{
    nvml_device *dev = device_of(d);
    if (!dev) return initialized ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    nvml_fabric_info_v2 info;
    memcpy(&info.version, out, sizeof info.version);
    if ((info.version >> 24) < 2 || (info.version & 0xffffff) < sizeof info)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memset(info.clusterUuid, 0, sizeof info.clusterUuid);
    info.status = NVML_SUCCESS;
    info.cliqueId = 0;
    info.state = fabric_supported(dev->index) ? NVML_GPU_FABRIC_STATE_COMPLETED
                                              : NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
    info.healthMask = 0;
    memcpy(out, &info, sizeof info); /* the caller's struct is at least this big (version) */
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *n,
                                                         void *infos)
{
    (void)d, (void)n, (void)infos;
    return unsupported("nvmlDeviceGetComputeRunningProcesses");
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link,
                                                        int *type)
{
    (void)d, (void)link, (void)type;
    return unsupported("nvmlDeviceGetNvLinkRemoteDeviceType");
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
                                                        void *pci)
{
    (void)d, (void)link, (void)pci;
    return unsupported("nvmlDeviceGetNvLinkRemotePciInfo_v2");
}
