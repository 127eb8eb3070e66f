"""The layers `engine.models` builds its decoder from: norm, rotary tables, and the linears
(packed, quantized, chosen by rows, row-invariant) with the quantized weights they hold."""
