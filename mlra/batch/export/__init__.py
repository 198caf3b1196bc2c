"""`mlra export`: a run or a batch written into the trackers researchers already use
(MLflow, Weights & Biases, TensorBoard), each behind the one small seam of
`trackers.py`, so a tracker's package is imported only by the export that names it;
names.py makes the names a run's scripts chose into keys every tracker accepts."""
