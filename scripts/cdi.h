/* cdi: `gpucap cdi`, which writes a Container Device Interface spec (JSON) that puts containers
 * under gpucap: the library bind-mounted read-only, LD_PRELOAD naming it and the settings the
 * options give, as the container edits of one device, CDI_KIND=NAME. Runtimes that read CDI
 * (podman, containerd, CRI-O; Kubernetes through a device plug-in or DRA driver) apply them
 * when a container asks for that device.
 */
#ifndef GPUCAP_SCRIPTS_CDI_H
#define GPUCAP_SCRIPTS_CDI_H

/* The spec's kind: vendor "gpucap.dev", class "cap". */
#define CDI_KIND "gpucap.dev/cap"

/* `gpucap cdi [--name NAME] [--cdi-version V] [--lib PATH] [--container-lib PATH] [-o FILE]
 * [OPTIONS of gpucap run]`; argv[0] is "cdi". Returns the exit status: 0, CLI_FAIL when the
 * output cannot be written, CLI_ERROR for a bad option or setting (the message printed). */
int cdi_main(int argc, char **argv);

#endif
