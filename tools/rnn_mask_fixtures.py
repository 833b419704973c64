#!/usr/bin/env python3
"""rnn_mask_fixtures.py — Keras 3's recurrent layers on masked sequences, for tests/test_rnn_mask.c.

The masks (Embedding mask_zero, Masking) are another part's layers; this
passes a mask to each layer call directly (layer(x, mask=m)), so that the
recurrent layers' own handling of it is checked against Keras: masked steps
carry the state over, a masked step's output is that state or 0
(zero_output_for_mask, which Bidirectional forces for sequences), with
go_backwards, GRU's two forms and Bidirectional's flip. Writes x.npy,
mask.npy and per case <name>_y.npy and <name>_w<i>.npy (weights random, in
the layer's weight order) into tests/fixtures/rnn_mask.

usage: KERAS_BACKEND=jax JAX_PLATFORMS=cpu python tools/rnn_mask_fixtures.py [--out DIR]
"""
import argparse
import os

import numpy as np
import keras

L = keras.layers
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "rnn_mask"))
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(3)
    B, T, D = 4, 6, 3
    x = rng.normal(size=(B, T, D)).astype("float32")
    mask = np.ones((B, T), bool)
    mask[1, :2] = False   # leading masked steps, and the last
    mask[1, 5] = False
    mask[2, :] = False    # one valid step only
    mask[2, 3] = True
    mask[3, 4:] = False   # trailing masked steps (a padded sequence)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "mask.npy"), mask.astype("float32"))
    cases = [("lstm_seq", L.LSTM(4, return_sequences=True)),
             ("lstm_last_back", L.LSTM(4, go_backwards=True)),
             ("gru_seq_back", L.GRU(3, return_sequences=True, go_backwards=True)),
             ("gru_noreset", L.GRU(3, reset_after=False)),
             ("simple_seq_zero", L.SimpleRNN(3, return_sequences=True, zero_output_for_mask=True)),
             ("bidi_lstm_seq", L.Bidirectional(L.LSTM(3, return_sequences=True))),
             ("bidi_gru_last", L.Bidirectional(L.GRU(2), merge_mode="sum"))]
    for name, layer in cases:
        inp, m = keras.Input((T, D)), keras.Input((T,), dtype="bool")
        model = keras.Model([inp, m], layer(inp, mask=m))
        for w in layer.weights:
            w.assign(rng.normal(size=w.shape).astype("float32") * 0.5)
        np.save(os.path.join(out, name + "_y.npy"), model.predict([x, mask], verbose=0))
        for i, w in enumerate(layer.weights):
            np.save(os.path.join(out, "%s_w%d.npy" % (name, i)), np.asarray(w))
        print("wrote", name)


if __name__ == "__main__":
    main()
