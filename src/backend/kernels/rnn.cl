/*
 * rnn.cl — SimpleRNN, LSTM, GRU: one kernel per step for the gates (ops/rnn_math.h) on the GPU, written once for CUDA and OpenCL (dialect.h).
 * (Being moved here from the CUDA plugin: until then its kernels are CUDA's only.)
 */
