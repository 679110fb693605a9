"""How items are scored fast and safely: the model contract and its torch scorers (`scoring`),
out-of-memory back-off (`batching`), data parallel ranks (`distributed`) and the run directory
that makes a run resumable and never overwritten (`runstore`)."""
