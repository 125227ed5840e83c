__device__ int counter;
__device__ float table[100] = {1.0f, 2.0f};
__constant__ int params[4] = {7, 8, 9, 10};
extern "C" __global__ void __launch_bounds__(256) bounded(float *a, int n) { int i = threadIdx.x; if (i < n) a[i] += table[i] + params[0]; }
extern "C" __global__ void shared_user(float *a) { __shared__ float buf[1024]; buf[threadIdx.x] = a[threadIdx.x]; __syncthreads(); a[threadIdx.x] = buf[1023 - threadIdx.x] + counter; }
__device__ float helper(float x) { return x * 2; }
extern "C" __global__ void uses_helper(float *a, double d, char c) { a[0] = helper(a[0]) + d + c; }
extern "C" __global__ void dynamic_user(float *a) { extern __shared__ float dyn[]; dyn[threadIdx.x] = a[threadIdx.x]; a[threadIdx.x] = dyn[31 - threadIdx.x]; }
