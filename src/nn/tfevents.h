/*
 * tfevents.h — TensorBoard event files (tfevents.c): the TFRecord framing
 * with masked CRC-32C, a small protobuf encoder, and the Event messages that
 * TensorFlow 2's summary writer writes (tf.summary.scalar, .histogram and
 * Keras's model summary). Used by the TensorBoard callback (nn/tensorboard.c).
 */
#ifndef FL_IO_TFEVENTS_H
#define FL_IO_TFEVENTS_H

#include "flynn/flynn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), continuing crc
 * (0 to start): crc32c("123456789") = 0xE3069283. */
uint32_t fl_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: ((c >> 15) | (c << 17)) + 0xa282ead8 of crc32c(data). */
uint32_t fl_crc32c_masked(const void *data, size_t n);

/* A growing byte buffer that protobuf fields are appended to; an allocation
 * failure sets oom (checked once at the end) instead of failing each call. */
typedef struct fl_pb {
    uint8_t *buf;
    size_t len, cap;
    bool oom;
} fl_pb;
void fl_pb_free(fl_pb *b);
void fl_pb_raw(fl_pb *b, const void *data, size_t n);
void fl_pb_varint(fl_pb *b, uint64_t v);
/* field key: (field << 3) | wire type (0 varint, 1 64-bit, 2 length-delimited) */
void fl_pb_key(fl_pb *b, int field, int wire);
void fl_pb_uint(fl_pb *b, int field, uint64_t v);         /* varint field */
void fl_pb_double(fl_pb *b, int field, double v);         /* fixed 64-bit field */
void fl_pb_bytes(fl_pb *b, int field, const void *data, size_t n); /* length-delimited */
void fl_pb_message(fl_pb *b, int field, const fl_pb *msg);

/* One TFRecord: length (uint64 LE), masked CRC of the length, data, masked
 * CRC of the data, appended to out. */
void fl_tfrecord_frame(fl_pb *out, const void *data, size_t n);

/* TensorFlow's DataType values that the writer uses */
enum { FL_TF_DT_FLOAT = 1, FL_TF_DT_DOUBLE = 2, FL_TF_DT_STRING = 7 };

/* The histogram TensorBoard's tf.summary.histogram computes (bucket_count
 * buckets over [min, max] of the finite values, in double): out[k*3 + 0..2]
 * = left edge, right edge, count, for k < buckets. No finite value: all
 * zeros; one distinct value: every edge that value, the count in the last
 * bucket. */
void fl_tf_histogram(const float *data, size_t n, int buckets, double *out);

/* An open events file, as tf.summary.create_file_writer(dir) makes it:
 * dir/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2, starting with the
 * file_version "brain.Event:2" event. */
typedef struct fl_tfevents fl_tfevents;
/* Creates dir (and its parents) when missing, and a new file in it (n counts
 * up until a name is free). NULL with a message naming the path and the
 * system's reason. */
fl_tfevents *fl_tfevents_open(const char *dir);
const char *fl_tfevents_path(const fl_tfevents *w);
/* Summary events: one Summary.Value with a tensor and its plugin metadata,
 * as TF 2 writes them (metadata in every event). */
fl_status fl_tfevents_scalar(fl_tfevents *w, const char *tag, int64_t step, float value);
fl_status fl_tfevents_histogram(fl_tfevents *w, const char *tag, int64_t step, const float *data, size_t n);
fl_status fl_tfevents_string(fl_tfevents *w, const char *tag, int64_t step, const char *s, const char *plugin,
                             const char *plugin_content);
/* Writes what is buffered to the file (so that a running TensorBoard sees it). */
fl_status fl_tfevents_flush(fl_tfevents *w);
/* Flushes, closes and frees; FL_OK or the write/close error. NULL is fine. */
fl_status fl_tfevents_close(fl_tfevents *w);

/* The Event message bytes (without framing) of a summary event with one
 * tensor value; exposed for the tests. shape: ndim sizes. */
fl_status fl_tfevents_encode_tensor(fl_pb *out, double wall_time, int64_t step, const char *tag, int dtype,
                                    int ndim, const int64_t *shape, const void *content, size_t content_len,
                                    bool content_is_string, const char *plugin, const char *plugin_content);

#endif
