// A kernel whose threads need 16 KiB of stack (an array indexed at run time lives in local
// memory), for test_driver.sh: launching it makes the driver reserve a deeper stack.
extern "C" __global__ void deep(float *a, int i) { float big[4096]; for (int k = 0; k < 4096; k++) { big[k] = a[k]; } a[0] = big[i & 4095]; }
