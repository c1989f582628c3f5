"""The pure core: what a state is and which values, keys, texts and schemas are allowed.

Owns the model (entries, handoff, state), values, how they compare and shapes, times as a
person gives and reads them, the schema and its approval policies, the input rules (keys,
reasons, the clock rule of every namespace), the commit trailers, text safety, the secret
scan, the wake-up renderer, the run event vocabulary, the typed records and results every
surface returns, the error tree and the layout (every file and ref name gitstate owns).

May import: nothing of gitstate outside this package. No file, no git, no clock reading:
everything here is a function of its arguments, so every other package can use it.
"""
