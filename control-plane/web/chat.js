// The chat view (not built yet).

export function show(section) {
  section.querySelector("p").textContent = "Not built yet.";
}
