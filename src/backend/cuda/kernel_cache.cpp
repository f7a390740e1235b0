// placeholder until the CUDA expression backend lands
