/* Test scaffolding for Wine 8 only (docs/development.md): Rust's std
 * (>= 1.78) imports bcryptprimitives.dll!ProcessPrng, which real Windows 10+
 * and Wine >= 9 have and Wine 8 lacks, so the .exe exits 53 before main.
 * This stub fills it in over RtlGenRandom (advapi32!SystemFunction036) in the
 * CI's Wine prefix. The product ships nothing of it. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
