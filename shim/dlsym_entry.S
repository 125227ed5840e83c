/* gpucap's dlsym: asks gpucap_dlsym_pre() whether the lookup is one gpucap answers; if not,
 * tail-jumps to glibc's dlsym with the caller's return address still on the stack, so
 * RTLD_NEXT keeps searching after the caller, not after gpucap (see docs/design.md).
 * One unversioned definition serves callers bound to dlsym@GLIBC_2.2.5 and @GLIBC_2.34.
 */
#if defined(__x86_64__)
        .text
        .globl  dlsym
        .type   dlsym, @function
dlsym:
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
#elif defined(__aarch64__)
        .text
        .globl  dlsym
        .type   dlsym, %function
dlsym:
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
#else
#error "gpucap's dlsym entry exists for x86_64 and aarch64 only"
#endif
        .section .note.GNU-stack, "", %progbits
