"""denki command line and Gradio demo (thin layer over serve/, pretrain/ and models/)."""
