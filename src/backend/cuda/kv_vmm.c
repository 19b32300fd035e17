/* backend/cuda/kv_vmm.c: device memory for the KV block pool (kv/pool.c): address
 * space reserved once per pool class and physical memory mapped into it as blocks
 * are first handed out (CUDA's virtual memory management: cuMemAddressReserve,
 * cuMemCreate, cuMemMap, cuMemSetAccess), so a class's blocks sit at one base and
 * growing a pool never moves a row. The driver functions are looked up through the
 * runtime (cudaGetDriverEntryPointByVersion): the library links no libcuda. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "backend/cuda/cuda_backend.h"
#include "base/err.h"

typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_afree)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*fn_gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);

static struct {
    fn_reserve reserve;
    fn_afree afree;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_access access;
    fn_gran gran;
    int ok;
} D;
static pthread_once_t d_once = PTHREAD_ONCE_INIT;

static void *entry(const char *name) {
    void *f = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return f;
}

static void d_init(void) {
    D.reserve = (fn_reserve)entry("cuMemAddressReserve");
    D.afree = (fn_afree)entry("cuMemAddressFree");
    D.create = (fn_create)entry("cuMemCreate");
    D.release = (fn_release)entry("cuMemRelease");
    D.map = (fn_map)entry("cuMemMap");
    D.unmap = (fn_unmap)entry("cuMemUnmap");
    D.access = (fn_access)entry("cuMemSetAccess");
    D.gran = (fn_gran)entry("cuMemGetAllocationGranularity");
    D.ok = D.reserve && D.afree && D.create && D.release && D.map && D.unmap && D.access && D.gran;
}

static CUmemAllocationProp prop_of(int device) {
    CUmemAllocationProp p = {0};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

static int ready(int device) {
    pthread_once(&d_once, d_init);
    if (!D.ok) return err_set("GPU %d: the driver has no virtual memory management functions", device);
    cudaSetDevice(device);
    cudaFree(0); /* the primary context exists before driver calls */
    return 0;
}

void *cuda_vm_reserve(int device, size_t bytes, size_t *granule) {
    if (ready(device) != 0) return NULL;
    const CUmemAllocationProp p = prop_of(device);
    size_t g = 0;
    if (D.gran(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || !g) {
        err_set("GPU %d: no allocation granularity", device);
        return NULL;
    }
    bytes = (bytes + g - 1) / g * g;
    CUdeviceptr at = 0;
    if (D.reserve(&at, bytes ? bytes : g, g, 0, 0) != CUDA_SUCCESS) {
        err_set("GPU %d: cannot reserve %.1f GiB of address space", device, (double)bytes / (1 << 30));
        return NULL;
    }
    *granule = g;
    return (void *)(uintptr_t)at;
}

int cuda_vm_map(int device, void *at, size_t bytes) {
    if (ready(device) != 0) return -1;
    const CUmemAllocationProp p = prop_of(device);
    CUmemGenericAllocationHandle h;
    if (D.create(&h, bytes, &p, 0) != CUDA_SUCCESS) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return err_set("GPU %d: out of memory mapping %.1f MiB of KV blocks (%.1f MiB free of %.1f MiB)", device,
                       bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0);
    }
    const CUdeviceptr d = (CUdeviceptr)(uintptr_t)at;
    CUmemAccessDesc a = {0};
    a.location = p.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    int ok = D.map(d, bytes, 0, h, 0) == CUDA_SUCCESS;
    if (ok && D.access(d, bytes, &a, 1) != CUDA_SUCCESS) {
        D.unmap(d, bytes);
        ok = 0;
    }
    D.release(h); /* the mapping keeps the memory until it is unmapped */
    if (!ok) return err_set("GPU %d: cannot map %.1f MiB of KV blocks", device, bytes / 1048576.0);
    /* zeroed, as alloc's memory is: a block's unused rows then hold finite values */
    /* (on the legacy stream, which the backend's non-blocking stream does not wait
     * for: waited for here, before any of the backend's work can touch the blocks) */
    if (cudaMemset(at, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        cudaGetLastError();
        return err_set("GPU %d: cannot clear %.1f MiB of KV blocks", device, bytes / 1048576.0);
    }
    return 0;
}

void cuda_vm_free(int device, void *base, size_t reserved, size_t mapped) {
    if (!base || ready(device) != 0) return;
    cudaDeviceSynchronize();
    const CUdeviceptr d = (CUdeviceptr)(uintptr_t)base;
    if (mapped) D.unmap(d, mapped);
    D.afree(d, reserved);
}

int cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    cudaSetDevice(device);
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        cudaGetLastError();
        return err_set("GPU %d: cannot read its free memory", device);
    }
    return 0;
}
