// The console's one script, embedded like its stylesheet: copy buttons for secrets shown once.
// Every page works without it; the buttons stay hidden where it does not run.
"use strict";
document.querySelectorAll("button[data-copy]").forEach((button) => {
  button.hidden = false;
  button.addEventListener("click", () => {
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    const selectIt = () => {
      window.getSelection().selectAllChildren(source);
      button.textContent = "Selected: press Ctrl+C";
    };
    if (!navigator.clipboard) return selectIt();
    navigator.clipboard.writeText(source.textContent).then(
      () => { button.textContent = "Copied"; },
      selectIt,
    );
  });
});
