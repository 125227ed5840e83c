/* gpucap's dlsym: asks gpucap_dlsym_pre() whether the lookup is one gpucap answers; if not,
 * tail-jumps to glibc's dlsym with the caller's return address still on the stack, so
 * RTLD_NEXT keeps searching after the caller, not after gpucap (see docs/design.md).
 * gpucap's dlopen, the same way: gpucap_dlopen_pre() (shim/entry/deepbind.c) gets the caller's return
 * address and a flag; it opens an RTLD_DEEPBIND request itself (setting the flag) or leaves
 * it to a tail jump to glibc's dlopen, which then sees its caller as it would without gpucap
 * (dlopen searches the caller's RUNPATH). One unversioned definition of each serves callers
 * bound to @GLIBC_2.2.5 and @GLIBC_2.34. gpucap_dlsym_entry / gpucap_dlopen_entry are hidden
 * names of the same addresses, for gpucap's own use.
 */
#if defined(__x86_64__)
        .text
        .globl  dlsym
        .type   dlsym, @function
        .globl  gpucap_dlsym_entry
        .hidden gpucap_dlsym_entry
dlsym:
gpucap_dlsym_entry:
#if defined(__CET__)
        endbr64
#endif
        push    %rdi
        push    %rsi
        sub     $8, %rsp
        call    gpucap_dlsym_pre
        add     $8, %rsp
        pop     %rsi
        pop     %rdi
        test    %rax, %rax
        jz      1f
        ret
1:      jmp     *gpucap_real_dlsym(%rip)
        .size   dlsym, .-dlsym

        .globl  dlopen
        .type   dlopen, @function
        .globl  gpucap_dlopen_entry
        .hidden gpucap_dlopen_entry
dlopen:
gpucap_dlopen_entry:
#if defined(__CET__)
        endbr64
#endif
        push    %rdi
        push    %rsi
        sub     $24, %rsp               /* 16-byte aligned again; 0(%rsp): the flag */
        movq    $0, (%rsp)
        mov     40(%rsp), %rdx          /* the caller's return address */
        mov     %rsp, %rcx
        call    gpucap_dlopen_pre
        mov     (%rsp), %rcx
        add     $24, %rsp
        pop     %rsi
        pop     %rdi
        test    %rcx, %rcx
        jz      2f
        ret
2:      jmp     *gpucap_real_dlopen(%rip)
        .size   dlopen, .-dlopen
#elif defined(__aarch64__)
        .text
        .globl  dlsym
        .type   dlsym, %function
        .globl  gpucap_dlsym_entry
        .hidden gpucap_dlsym_entry
dlsym:
gpucap_dlsym_entry:
        stp     x29, x30, [sp, #-32]!
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        bl      gpucap_dlsym_pre
        mov     x2, x0
        ldp     x0, x1, [sp, #16]
        ldp     x29, x30, [sp], #32
        cbz     x2, 1f
        mov     x0, x2
        ret
1:      adrp    x16, gpucap_real_dlsym
        ldr     x16, [x16, :lo12:gpucap_real_dlsym]
        br      x16
        .size   dlsym, .-dlsym

        .globl  dlopen
        .type   dlopen, %function
        .globl  gpucap_dlopen_entry
        .hidden gpucap_dlopen_entry
dlopen:
gpucap_dlopen_entry:
        stp     x29, x30, [sp, #-48]!
        mov     x29, sp
        stp     x0, x1, [sp, #16]
        str     xzr, [sp, #32]          /* the flag */
        mov     x2, x30                 /* the caller's return address */
        add     x3, sp, #32
        bl      gpucap_dlopen_pre
        ldr     x3, [sp, #32]
        mov     x2, x0
        ldp     x0, x1, [sp, #16]
        ldp     x29, x30, [sp], #48
        cbz     x3, 2f
        mov     x0, x2
        ret
2:      adrp    x16, gpucap_real_dlopen
        ldr     x16, [x16, :lo12:gpucap_real_dlopen]
        br      x16
        .size   dlopen, .-dlopen
#else
#error "gpucap's dlsym entry exists for x86_64 and aarch64 only"
#endif
        .section .note.GNU-stack, "", %progbits
