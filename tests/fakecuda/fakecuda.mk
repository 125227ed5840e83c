# Fake CUDA driver.
